//! The track segment document: one drone's positions whose device time falls in one
//! stretch `[startMs, endMs)`, `startMs` being the device time floored to the writer's span.
//! The shared contract of the writer, the reader and the planner:
//!
//! ```json
//! {"id":"drone-0042:seg:1795338900000","deviceId":"drone-0042",
//!  "kind":"segment","schemaVersion":1,
//!  "startMs":1795338900000,"endMs":1795339200000,
//!  "firstSeq":1830,"lastSeq":1889,"n":60,
//!  "points":[[1830,1795338902500,-122.3493,47.6205,121.5,270.0,12.3,81]],
//!  "ttl":604800}
//! ```
//!
//! - `id` = `{document_id(deviceId)}:seg:{startMs}` ([`segment_id`]).
//! - `points` are sorted by `seq`, each `seq` once. A point is
//!   `[seq, deviceTimeMs, lon, lat, altM, headingDeg, speedMps, batteryPct]`: the first four
//!   always, an absent optional one `null`, trailing nulls left out (4 to 8 elements).
//! - `firstSeq`, `lastSeq` and `n` describe `points`; `ttl` only when given.
//!
//! A point is about 55 bytes, against about 400 for a document per position with its
//! system properties, and it adds no indexed term (`/points/*` is not indexed).

use serde_json::Value;

use super::{
    DOCUMENT_SCHEMA_VERSION, DocumentLayout, document_id, write_f64, write_int, write_str,
};
use crate::wire::Position;

/// Top-level names a segment adds to [`super::DOCUMENT_FIELDS`]' `id`, `deviceId`,
/// `kind`, `schemaVersion` and `ttl`.
pub const SEGMENT_FIELDS: [&str; 6] = ["startMs", "endMs", "firstSeq", "lastSeq", "n", "points"];

/// The id of the segment of a device starting at `start_ms`: `{document_id}:seg:{startMs}`.
pub fn segment_id(device_id: &str, start_ms: i64) -> String {
    format!("{}:seg:{start_ms}", document_id(device_id))
}

/// The start of the stretch of `span_ms` holding device time `device_time_ms` (floored,
/// also before 1970).
pub fn segment_start(device_time_ms: i64, span_ms: i64) -> i64 {
    device_time_ms.div_euclid(span_ms) * span_ms
}

/// One position of a segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SegmentPoint {
    /// The device's sequence number.
    pub seq: u64,
    /// Device time, Unix milliseconds.
    pub device_time_ms: i64,
    /// Longitude, degrees.
    pub lon: f64,
    /// Latitude, degrees.
    pub lat: f64,
    /// Altitude, metres.
    pub alt_m: Option<f64>,
    /// Heading, degrees.
    pub heading_deg: Option<f64>,
    /// Speed, metres per second.
    pub speed_mps: Option<f64>,
    /// Battery, percent.
    pub battery_pct: Option<u8>,
}

impl From<&Position> for SegmentPoint {
    fn from(pos: &Position) -> Self {
        SegmentPoint {
            seq: pos.seq,
            device_time_ms: pos.ts.timestamp_millis(),
            lon: pos.lon,
            lat: pos.lat,
            alt_m: pos.alt_m,
            heading_deg: pos.heading_deg,
            speed_mps: pos.speed_mps,
            battery_pct: pos.battery_pct,
        }
    }
}

impl SegmentPoint {
    /// Reads a point of a stored segment's `points`; `None` when it is not one.
    pub fn from_json(value: &Value) -> Option<SegmentPoint> {
        let a = value.as_array()?;
        if !(4..=8).contains(&a.len()) {
            return None;
        }
        let opt = |i: usize| a.get(i).and_then(Value::as_f64);
        Some(SegmentPoint {
            seq: a[0].as_u64()?,
            device_time_ms: a[1].as_i64()?,
            lon: a[2].as_f64()?,
            lat: a[3].as_f64()?,
            alt_m: opt(4),
            heading_deg: opt(5),
            speed_mps: opt(6),
            battery_pct: a.get(7).and_then(Value::as_u64).map(|b| b.min(100) as u8),
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        write_int(out, self.seq);
        out.push(b',');
        write_int(out, self.device_time_ms);
        out.push(b',');
        write_f64(out, self.lon);
        out.push(b',');
        write_f64(out, self.lat);
        let optional = [
            self.alt_m,
            self.heading_deg,
            self.speed_mps,
            self.battery_pct.map(f64::from),
        ];
        let present = optional
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |i| i + 1);
        for (i, value) in optional[..present].iter().enumerate() {
            out.push(b',');
            match (i, value) {
                (_, None) => out.extend_from_slice(b"null"),
                (3, Some(_)) => write_int(out, self.battery_pct.unwrap_or_default()),
                (_, Some(v)) => write_f64(out, *v),
            }
        }
        out.push(b']');
    }
}

/// The points of a stored segment document (`points` of its JSON); an error names what is
/// not a point.
pub fn stored_points(doc: &Value) -> Result<Vec<SegmentPoint>, String> {
    let points = doc
        .get("points")
        .and_then(Value::as_array)
        .ok_or("the segment has no points array")?;
    points
        .iter()
        .map(|p| SegmentPoint::from_json(p).ok_or_else(|| format!("not a segment point: {p}")))
        .collect()
}

/// Merges `new` into `points` by `seq` (a `seq` already there keeps its point), sorted by
/// `seq`; returns how many were added.
pub fn merge_points(
    points: &mut Vec<SegmentPoint>,
    new: impl IntoIterator<Item = SegmentPoint>,
) -> usize {
    let before = points.len();
    points.extend(new);
    // Stable: of equal seqs the stored (earlier) one stays first and is kept.
    points.sort_by_key(|p| p.seq);
    points.dedup_by_key(|p| p.seq);
    points.len() - before
}

impl DocumentLayout {
    /// Appends the segment of `device_id` over `[start_ms, end_ms)` holding `points`
    /// (sorted by `seq`, unique, at least one) to `out`, with `ttl` in seconds when given.
    pub fn write_segment(
        &self,
        device_id: &str,
        (start_ms, end_ms): (i64, i64),
        points: &[SegmentPoint],
        ttl: Option<u32>,
        out: &mut Vec<u8>,
    ) {
        debug_assert!(
            points.windows(2).all(|w| w[0].seq < w[1].seq),
            "points sorted by seq, unique"
        );
        out.reserve(200 + 4 * device_id.len() + 64 * points.len());
        out.extend_from_slice(b"{\"id\":");
        write_str(out, &segment_id(device_id, start_ms));
        out.extend_from_slice(b",\"deviceId\":");
        write_str(out, device_id);
        self.write_nested_key(device_id, out);
        out.extend_from_slice(b",\"kind\":\"segment\",\"schemaVersion\":");
        write_int(out, DOCUMENT_SCHEMA_VERSION);
        out.extend_from_slice(b",\"startMs\":");
        write_int(out, start_ms);
        out.extend_from_slice(b",\"endMs\":");
        write_int(out, end_ms);
        out.extend_from_slice(b",\"firstSeq\":");
        write_int(out, points.first().map_or(0, |p| p.seq));
        out.extend_from_slice(b",\"lastSeq\":");
        write_int(out, points.last().map_or(0, |p| p.seq));
        out.extend_from_slice(b",\"n\":");
        write_int(out, points.len());
        out.extend_from_slice(b",\"points\":[");
        for (i, point) in points.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            point.write(out);
        }
        out.push(b']');
        if let Some(ttl) = ttl {
            out.extend_from_slice(b",\"ttl\":");
            write_int(out, ttl);
        }
        out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn point(seq: u64) -> SegmentPoint {
        SegmentPoint {
            seq,
            device_time_ms: 1_795_338_900_000 + 5_000 * (seq % 60) as i64,
            lon: -122.3493,
            lat: 47.6205,
            alt_m: Some(121.5),
            heading_deg: Some(270.0),
            speed_mps: Some(12.3),
            battery_pct: Some(81),
        }
    }

    fn written(
        layout: &DocumentLayout,
        device: &str,
        points: &[SegmentPoint],
        ttl: Option<u32>,
    ) -> String {
        let mut out = Vec::new();
        layout.write_segment(
            device,
            (1_795_338_900_000, 1_795_339_200_000),
            points,
            ttl,
            &mut out,
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_segment_is_written_as_the_contract_shows() {
        let mut sparse = point(1831);
        sparse.heading_deg = None;
        sparse.speed_mps = None;
        sparse.battery_pct = None;
        let mut gap = point(1832);
        gap.alt_m = None;
        gap.heading_deg = None;
        let text = written(
            &DocumentLayout::default(),
            "drone-0042",
            &[point(1830), sparse, gap],
            Some(604_800),
        );
        assert_eq!(
            text,
            r#"{"id":"drone-0042:seg:1795338900000","deviceId":"drone-0042","kind":"segment","schemaVersion":1,"startMs":1795338900000,"endMs":1795339200000,"firstSeq":1830,"lastSeq":1832,"n":3,"points":[[1830,1795339050000,-122.3493,47.6205,121.5,270.0,12.3,81],[1831,1795339055000,-122.3493,47.6205,121.5],[1832,1795339060000,-122.3493,47.6205,null,null,12.3,81]],"ttl":604800}"#
        );
    }

    #[test]
    fn stored_points_read_back_what_was_written() {
        let mut sparse = point(2);
        sparse.alt_m = None;
        sparse.battery_pct = None;
        let points = [point(1), sparse];
        let doc: Value =
            serde_json::from_str(&written(&DocumentLayout::default(), "d", &points, None)).unwrap();
        assert_eq!(stored_points(&doc).unwrap(), points);
        assert!(stored_points(&json!({"points": [[1, 2, 3]]})).is_err());
    }

    #[test]
    fn merging_keeps_each_seq_once_in_order() {
        let mut points = vec![point(3), point(5)];
        let mut replayed = point(5);
        replayed.lat = 0.0;
        assert_eq!(merge_points(&mut points, [point(4), replayed, point(1)]), 2);
        assert_eq!(
            points.iter().map(|p| p.seq).collect::<Vec<_>>(),
            [1, 3, 4, 5]
        );
        assert_eq!(points[3].lat, 47.6205, "the stored point of a seq stays");
    }

    #[test]
    fn stretches_floor_device_time() {
        assert_eq!(segment_start(1_795_339_199_999, 300_000), 1_795_338_900_000);
        assert_eq!(segment_start(1_795_339_200_000, 300_000), 1_795_339_200_000);
        assert_eq!(segment_start(-1, 300_000), -300_000);
        assert_eq!(segment_id("d?", 5), "d%3F:seg:5");
    }
}

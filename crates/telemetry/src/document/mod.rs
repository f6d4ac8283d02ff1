//! The Cosmos DB documents built from positions, and the partition key path they carry.
//!
//! Owns the document format: the "latest" document (one per drone, `id` = device id, the
//! drone's newest position), the track segment ([`segment`]: a stretch of one drone's
//! positions, how history is written), the "history" document of the earlier history
//! format (one per position, `id` = `{deviceId}:{seq}`, optional `ttl`; still read), and
//! [`PartitionKeyPath`].
//!
//! ```json
//! {"id":"drone-0042","deviceId":"drone-0042","kind":"latest","schemaVersion":1,"seq":1834,
//!  "deviceTime":"2026-11-22T09:15:02.500Z","deviceTimeMs":1795338902500,
//!  "enqueuedTimeMs":1795338903100,
//!  "location":{"type":"Point","coordinates":[-122.3493,47.6205]},
//!  "altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81,
//!  "gnss":{"fix":"3d","sats":12,"satsVisible":14,"hAccM":1.5}}
//! ```
//!
//! - `location` is a GeoJSON Point, longitude first. It is written by this module as
//!   exactly `{"type":"Point","coordinates":[lon,lat]}` (the `geojson` crate is not used:
//!   the output is the same and needs no allocation).
//! - Documents are written straight into a byte buffer ([`DocumentLayout::write_latest`]);
//!   the `serde_json::Value` forms are parsed from those bytes, so both forms agree.
//! - `deviceTime` is an RFC 3339 string; `deviceTimeMs` the same instant in Unix
//!   milliseconds, for numeric comparison in queries and conditions. `enqueuedTimeMs`, the
//!   hub's enqueued time in Unix milliseconds, is present only when the source knows it.
//!   (Documents before the GNSS health also had `enqueuedTime`, the same instant as a
//!   string; it made way for `gnss` in the patch, which Cosmos DB caps at 10 operations.
//!   A latest document written before keeps its old `enqueuedTime`: read `enqueuedTimeMs`.)
//! - Optional position fields are left out when the position lacks them. The GNSS health
//!   ([`crate::wire::Gnss`]) is one object, `gnss`, with the wire's member names, present
//!   when the position has any: one patch operation, and not indexed
//!   ([`crate::indexing`]).
//! - The device id is also written at the layout's partition key path (default
//!   `/deviceId`, which the document has anyway; `/fleet/deviceId` adds
//!   `"fleet":{"deviceId":"..."}`).
//! - Cosmos DB forbids `/`, `\`, `?` and `#` in ids, and IoT Hub allows `?` and `#` in
//!   device ids. [`document_id`] therefore writes `%` as `%25`, `#` as `%23` and `?` as
//!   `%3F` (a reversible escape); every other device id is its own document id.

use std::borrow::Cow;

use chrono::{DateTime, Utc};

use crate::time::MillisTime;
use crate::wire::{Gnss, Position};

mod partition_key;
mod segment;

pub use partition_key::{PartitionKeyPath, PartitionKeyPathError};
pub use segment::{
    SEGMENT_FIELDS, SegmentPoint, merge_points, segment_id, segment_start, stored_points,
};

/// The version of the document format, written as `schemaVersion`.
pub const DOCUMENT_SCHEMA_VERSION: u32 = 1;

/// The field of the document that always holds the device id, and the default partition key.
pub const DEVICE_ID_FIELD: &str = "deviceId";

/// Top-level fields of a drone's latest document that the writer sets from IoT Hub's
/// connection state and twin change events, apart from the position (a document holds only
/// these and its ids when the agent connected before the drone's first position):
/// connected or not, when it last connected and disconnected (RFC 3339), the
/// `sequenceNumber` of the connection event that set them, the reported `agent.version`
/// and the twin `version` that reported it.
pub const AGENT_FIELDS: [&str; 6] = [
    "agentConnected",
    "agentConnectedAt",
    "agentDisconnectedAt",
    "agentConnectionSeq",
    "agentVersion",
    "agentTwinVersion",
];

/// Top-level names the documents use (besides Cosmos system properties, which start
/// with `_`). A partition key path may not start with one of them, except `/deviceId`
/// itself, or its value would clash with the document's own field.
pub const DOCUMENT_FIELDS: [&str; 15] = [
    "id",
    "deviceId",
    "kind",
    "schemaVersion",
    "seq",
    "deviceTime",
    "deviceTimeMs",
    "enqueuedTimeMs",
    "location",
    "altM",
    "headingDeg",
    "speedMps",
    "batteryPct",
    "gnss",
    "ttl",
];

/// The Cosmos DB document id of a device: the device id, with `%`, `#` and `?` (allowed
/// by IoT Hub, but `#` and `?` not by Cosmos DB) percent-escaped. Borrows when nothing
/// needs escaping, which is the usual case.
pub fn document_id(device_id: &str) -> Cow<'_, str> {
    if !device_id.contains(['%', '#', '?']) {
        return Cow::Borrowed(device_id);
    }
    let mut id = String::with_capacity(device_id.len() + 8);
    for ch in device_id.chars() {
        match ch {
            '%' => id.push_str("%25"),
            '#' => id.push_str("%23"),
            '?' => id.push_str("%3F"),
            other => id.push(other),
        }
    }
    Cow::Owned(id)
}

/// The id of the history document of position `seq` of a device: `{document_id}:{seq}`.
pub fn history_id(device_id: &str, seq: u64) -> String {
    format!("{}:{seq}", document_id(device_id))
}

/// How documents are laid out in the container: where the partition key value goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentLayout {
    pk_path: PartitionKeyPath,
    /// For a path other than `/deviceId`: the JSON that opens the nested objects up to the
    /// value, e.g. `"fleet":{"deviceId":`, and how many objects to close after it.
    pk_open: Option<(Vec<u8>, usize)>,
}

impl Default for DocumentLayout {
    fn default() -> Self {
        DocumentLayout::new(PartitionKeyPath::default())
    }
}

impl DocumentLayout {
    /// A layout writing the device id at `pk_path` (and, always, at `/deviceId`).
    pub fn new(pk_path: PartitionKeyPath) -> Self {
        let pk_open = (!pk_path.is_device_id_field()).then(|| {
            let mut open = Vec::new();
            for (i, segment) in pk_path.segments().iter().enumerate() {
                if i > 0 {
                    open.push(b'{');
                }
                write_str(&mut open, segment);
                open.push(b':');
            }
            (open, pk_path.segments().len() - 1)
        });
        DocumentLayout { pk_path, pk_open }
    }

    /// The partition key path the documents carry the device id at.
    pub fn partition_key_path(&self) -> &PartitionKeyPath {
        &self.pk_path
    }

    /// Whether documents of this layout hold the device id (the partition key value a
    /// writer sends) at `container_path`. A writer should refuse to start when this is
    /// false for its container's partition key path: every document would otherwise land
    /// in one logical partition.
    pub fn carries(&self, container_path: &PartitionKeyPath) -> bool {
        container_path.is_device_id_field() || *container_path == self.pk_path
    }

    /// The latest-position document of the drone (`id` = [`document_id`]), as a JSON
    /// value (parsed from [`DocumentLayout::write_latest`]'s bytes).
    ///
    /// `pos` must be valid ([`Position::validate`]; [`crate::wire::decode`] returns only
    /// valid positions): JSON cannot hold NaN, which would be written as `null`.
    pub fn latest(&self, pos: &Position, enqueued: Option<DateTime<Utc>>) -> serde_json::Value {
        let mut out = Vec::with_capacity(DOCUMENT_CAPACITY);
        self.write_latest(pos, enqueued, &mut out);
        to_value(&out)
    }

    /// The history document of this position (`id` = [`history_id`]), with `ttl` in
    /// seconds when given. Same precondition as [`DocumentLayout::latest`].
    pub fn history(
        &self,
        pos: &Position,
        enqueued: Option<DateTime<Utc>>,
        ttl: Option<u32>,
    ) -> serde_json::Value {
        let mut out = Vec::with_capacity(DOCUMENT_CAPACITY);
        self.write_history(pos, enqueued, ttl, &mut out);
        to_value(&out)
    }

    /// Appends the latest-position document's JSON to `out`, written directly as bytes.
    pub fn write_latest(&self, pos: &Position, enqueued: Option<DateTime<Utc>>, out: &mut Vec<u8>) {
        self.write(pos, enqueued, Kind::Latest, out);
    }

    /// Appends the history document's JSON to `out`, written directly as bytes.
    pub fn write_history(
        &self,
        pos: &Position,
        enqueued: Option<DateTime<Utc>>,
        ttl: Option<u32>,
        out: &mut Vec<u8>,
    ) {
        self.write(pos, enqueued, Kind::History { ttl }, out);
    }

    /// Appends the conditional patch of the latest document to `out`: the body of a Cosmos
    /// DB Patch request that `set`s every field in [`PATCHED_FIELDS`] to this position's
    /// value, under the condition that the stored position is older
    /// ([`crate::PositionOrder::stored_is_older_condition`]). A field the position lacks is
    /// set to `null`, so a newer position that omits an optional field does not leave an
    /// older position's value behind. Written directly from the position, the same way as
    /// [`DocumentLayout::write_latest`] writes the document.
    pub fn write_patch(&self, pos: &Position, enqueued: Option<DateTime<Utc>>, out: &mut Vec<u8>) {
        debug_assert!(pos.validate().is_ok(), "documents need a valid position");
        out.reserve(PATCH_MAX);
        out.extend_from_slice(b"{\"operations\":[");
        let mut fields = Fields {
            out,
            style: Style::Patch { first: true },
        };
        write_changing(pos, enqueued, &mut fields);
        let out = fields.out;
        out.extend_from_slice(b"],\"condition\":\"");
        pos.order().write_stored_is_older_condition(out);
        out.extend_from_slice(b"\"}");
    }

    /// Writes `,"fleet":{"deviceId":"..."}` for a partition key path other than
    /// `/deviceId` (nothing for `/deviceId`, which every document has).
    fn write_nested_key(&self, device_id: &str, out: &mut Vec<u8>) {
        if let Some((open, depth)) = &self.pk_open {
            out.push(b',');
            out.extend_from_slice(open);
            write_str(out, device_id);
            out.extend(std::iter::repeat_n(b'}', *depth));
        }
    }

    /// Writes one document. Field names are literals; strings are copied as they are when
    /// they need no JSON escaping (always true of valid device ids) and escaped otherwise.
    fn write(
        &self,
        pos: &Position,
        enqueued: Option<DateTime<Utc>>,
        kind: Kind,
        out: &mut Vec<u8>,
    ) {
        debug_assert!(pos.validate().is_ok(), "documents need a valid position");
        // Room for the whole document of a valid position, so that the buffer grows at
        // most once: the id (escaped, three bytes per character at most) and the device
        // id (twice with a nested partition key), and the bounded rest.
        let pk_len = self.pk_open.as_ref().map_or(0, |(open, depth)| {
            open.len() + depth + pos.device_id.len() + 3
        });
        out.reserve(DOCUMENT_FIXED_MAX + 4 * pos.device_id.len() + pk_len);
        out.extend_from_slice(b"{\"id\":");
        let id = document_id(&pos.device_id);
        match kind {
            Kind::Latest => write_str(out, &id),
            Kind::History { .. } => {
                // `"{id}:{seq}"`: reopen the id string to append the sequence number.
                write_str(out, &id);
                out.pop();
                out.push(b':');
                write_int(out, pos.seq);
                out.push(b'"');
            }
        }
        out.extend_from_slice(b",\"deviceId\":");
        write_str(out, &pos.device_id);
        self.write_nested_key(&pos.device_id, out);
        out.extend_from_slice(match kind {
            Kind::Latest => b",\"kind\":\"latest\",\"schemaVersion\":",
            Kind::History { .. } => b",\"kind\":\"history\",\"schemaVersion\":",
        });
        write_int(out, DOCUMENT_SCHEMA_VERSION);
        let mut fields = Fields {
            out,
            style: Style::Document,
        };
        write_changing(pos, enqueued, &mut fields);
        let out = fields.out;
        if let Kind::History { ttl: Some(ttl) } = kind {
            out.extend_from_slice(b",\"ttl\":");
            write_int(out, ttl);
        }
        out.push(b'}');
    }
}

/// The fields of the latest document that change from one position to the next, in
/// document order: what a conditional patch sets. Cosmos DB allows at most 10 operations
/// in one patch; these are exactly 10. Every other field of [`DOCUMENT_FIELDS`] is fixed
/// for a drone (`id`, `deviceId`, `kind`, `schemaVersion`) or belongs to history
/// documents only (`ttl`).
pub const PATCHED_FIELDS: [&str; 10] = [
    "seq",
    "deviceTime",
    "deviceTimeMs",
    "enqueuedTimeMs",
    "location",
    "altM",
    "headingDeg",
    "speedMps",
    "batteryPct",
    "gnss",
];

/// How [`write_changing`] writes a field.
#[derive(Clone, Copy)]
enum Style {
    /// `,"name":value` inside a document; absent fields are left out.
    Document,
    /// `{"op":"set","path":"/name","value":value}` in a patch's operations; absent fields
    /// are set to `null`.
    Patch {
        /// No operation written yet (no comma before it).
        first: bool,
    },
}

/// The output of [`write_changing`] and its style.
struct Fields<'a> {
    out: &'a mut Vec<u8>,
    style: Style,
}

impl Fields<'_> {
    /// Writes field `name` (a literal that needs no escaping) with the value `write`
    /// appends, or, for `None`, as absent. Inlined, so that the names' lengths are
    /// constants and their copies plain moves rather than `memcpy` calls.
    #[inline(always)]
    fn field<T>(&mut self, name: &str, value: Option<T>, write: impl FnOnce(&mut Vec<u8>, T)) {
        let out = &mut *self.out;
        match (&mut self.style, value) {
            (Style::Document, None) => {}
            (Style::Document, Some(value)) => {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\":");
                write(out, value);
            }
            (Style::Patch { first }, value) => {
                if !std::mem::take(first) {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"op\":\"set\",\"path\":\"/");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\",\"value\":");
                match value {
                    Some(value) => write(out, value),
                    None => out.extend_from_slice(b"null"),
                }
                out.push(b'}');
            }
        }
    }
}

/// Writes the fields of [`PATCHED_FIELDS`], in that order: the part of the latest
/// document that a patch replaces, defined once for both.
#[inline(always)]
fn write_changing(pos: &Position, enqueued: Option<DateTime<Utc>>, fields: &mut Fields<'_>) {
    let [
        seq,
        device_time,
        device_time_ms,
        enqueued_time_ms,
        location,
        alt,
        heading,
        speed,
        battery,
        gnss,
    ] = PATCHED_FIELDS;
    fields.field(seq, Some(pos.seq), write_int);
    fields.field(device_time, Some(pos.ts), |out, ts| {
        MillisTime(ts).write_json(out)
    });
    fields.field(device_time_ms, Some(pos.ts), |out, ts| {
        write_int(out, ts.timestamp_millis());
    });
    fields.field(enqueued_time_ms, enqueued, |out, t| {
        write_int(out, t.timestamp_millis());
    });
    fields.field(location, Some(pos), |out, pos| {
        out.extend_from_slice(b"{\"type\":\"Point\",\"coordinates\":[");
        write_f64(out, pos.lon);
        out.push(b',');
        write_f64(out, pos.lat);
        out.extend_from_slice(b"]}");
    });
    fields.field(alt, pos.alt_m, write_f64);
    fields.field(heading, pos.heading_deg, write_f64);
    fields.field(speed, pos.speed_mps, write_f64);
    fields.field(battery, pos.battery_pct, write_int);
    fields.field(gnss, (!pos.gnss.is_empty()).then_some(pos.gnss), write_gnss);
}

/// Writes the GNSS health as an object of the members the position has, named as on the
/// wire: `{"fix":"3d","sats":12,"satsVisible":14,"hAccM":1.5}`.
fn write_gnss(out: &mut Vec<u8>, gnss: Gnss) {
    let mut sep = b'{';
    let mut member = |out: &mut Vec<u8>, name: &[u8]| {
        out.push(std::mem::replace(&mut sep, b','));
        out.extend_from_slice(name);
    };
    if let Some(fix) = gnss.fix {
        member(out, b"\"fix\":\"");
        out.extend_from_slice(fix.as_str().as_bytes());
        out.push(b'"');
    }
    if let Some(sats) = gnss.sats {
        member(out, b"\"sats\":");
        write_int(out, sats);
    }
    if let Some(sats) = gnss.sats_visible {
        member(out, b"\"satsVisible\":");
        write_int(out, sats);
    }
    if let Some(h_acc) = gnss.h_acc_m {
        member(out, b"\"hAccM\":");
        write_f64(out, h_acc);
    }
    out.push(b'}');
}

/// An upper bound of a patch's length: ten operations of at most 45 bytes of punctuation
/// and path each, their values (as in [`DOCUMENT_FIXED_MAX`]), the GeoJSON wrapper, the
/// request's own punctuation and the condition (at most 170 bytes).
const PATCH_MAX: usize = 10 * 45 + 26 + 6 * 24 + 6 * 20 + GNSS_PUNCTUATION_MAX + 40 + 30 + 170;

/// Room for a typical document, so that building one allocates once.
const DOCUMENT_CAPACITY: usize = 512;

/// An upper bound of a document's length without its ids and partition key: field names
/// and punctuation (about 250 bytes), one time, six floats of at most 24 bytes, six
/// integers of at most 20 and the `gnss` object's own names and punctuation.
const DOCUMENT_FIXED_MAX: usize = 250 + 26 + 6 * 24 + 6 * 20 + GNSS_PUNCTUATION_MAX;

/// The names and punctuation of the fullest `gnss` object, with its longest fix name:
/// `{"fix":"rtkFloat","sats":,"satsVisible":,"hAccM":}`.
const GNSS_PUNCTUATION_MAX: usize = 50;

fn to_value(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).expect("the document writer writes valid JSON")
}

/// Which of the two documents to build.
#[derive(Clone, Copy)]
enum Kind {
    Latest,
    History { ttl: Option<u32> },
}

/// Writes `text` as a JSON string.
fn write_str(out: &mut Vec<u8>, text: &str) {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, text).expect("writing JSON into a Vec cannot fail");
    }
}

/// Writes an integer.
fn write_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Writes a number as serde_json does (shortest round-trip form), `null` if not finite.
fn write_f64(out: &mut Vec<u8>, value: f64) {
    if value.is_finite() {
        out.extend_from_slice(zmij::Buffer::new().format_finite(value).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_longest_patch_fits_its_reservation() {
        let t = DateTime::from_timestamp_millis(253_402_300_799_999).unwrap();
        let long = -0.123_456_789_012_345_67;
        let pos = Position {
            device_id: "d".into(),
            seq: u64::MAX,
            ts: t,
            lat: long,
            lon: long,
            alt_m: Some(long),
            heading_deg: Some(long),
            speed_mps: Some(long),
            battery_pct: Some(100),
            gnss: Gnss {
                fix: Some(crate::wire::FixType::RtkFloat),
                sats: Some(255),
                sats_visible: Some(255),
                h_acc_m: Some(-long),
            },
        };
        let mut out = Vec::new();
        DocumentLayout::default().write_patch(&pos, Some(t), &mut out);
        assert!(out.len() <= PATCH_MAX, "{} > {PATCH_MAX}", out.len());
        assert_eq!(out.capacity(), PATCH_MAX, "one allocation, no growth");
    }

    proptest! {
        #[test]
        fn numbers_are_written_as_serde_json_writes_them(value in proptest::num::f64::ANY) {
            let mut out = Vec::new();
            write_f64(&mut out, value);
            prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&value).unwrap());
        }
    }
}

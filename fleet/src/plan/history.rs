//! History as track segments: what a drone's day of history costs in RU and storage.
//!
//! The writer keeps a drone's positions in segments, one per stretch of device time of
//! `HISTORY_SEGMENT_SPAN` (`kind` "segment", the points as arrays; the indexing policy leaves
//! `points` out). The writer holds a drone's positions at most `HISTORY_HOLD` and writes its
//! segment when the drone moves to the next stretch or the hold runs out: the first write
//! creates the segment, each later one replaces it with the points merged (a Replace with
//! `ifMatch`, cloud-writer's `segment_write` module). The charges are
//! those the local endpoint makes and Microsoft publishes ([`cosmos_wire::charges`]): a write
//! by the stored size, and 0.2 RU per indexed term it adds or removes, the terms being those
//! the container's policy makes of the segment ([`IndexingPolicy::terms`]).
//!
//! Cost: a five-minute segment of 60 positions is about 7 KB. Held 2 minutes (the writer's
//! default) it is written three times, about 36 RU; held the whole span, once, about 8 RU;
//! one document per position cost 60 × 6.2 = 372 RU. The same positions take about a fifth
//! of the bytes.

use std::time::Duration;

use cosmos_wire::charges::{self, TermChanges};
use cosmos_wire::indexing::IndexingPolicy;
use serde::Serialize;
use serde_json::{Value, json};

/// The system properties Cosmos DB stores with every document (`_rid`, `_self`, `_etag`,
/// `_attachments`, `_ts`), in the form and length it writes them.
const SYSTEM_PROPERTIES: &str = r#","_rid":"AbCdEfGhIjkBAAAAAAAAAA==","_self":"dbs/AbCdEf==/colls/AbCdEfGhIjk=/docs/AbCdEfGhIjkBAAAAAAAAAA==/","_etag":"\"0b00b9d6-0000-0800-0000-675f2b1c0000\"","_attachments":"attachments/","_ts":1795339200"#;

/// The writer's `HISTORY_HOLD` by default: the longest a position waits, unacknowledged,
/// for its segment's write.
pub const DEFAULT_HOLD: Duration = cloud_writer::DEFAULT_SEGMENT_HOLD;

/// How the writer keeps history: how long, the stretch of device time one segment holds, and
/// how long it holds a segment's positions before writing them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct History {
    /// How long segments are kept (their `ttl`).
    pub kept: Duration,
    /// The stretch of device time of one segment (the writer's `HISTORY_SEGMENT_SPAN`).
    pub segment_span: Duration,
    /// The longest the writer holds a position before writing its segment (its
    /// `HISTORY_HOLD`); the span: one write per segment.
    pub hold: Duration,
}

impl History {
    /// Kept for `kept`, in segments of `span`, held as the writer holds them by default.
    pub fn segments(kept: Duration, span: Duration) -> History {
        History {
            kept,
            segment_span: span,
            hold: DEFAULT_HOLD.min(span),
        }
    }
}

/// What a drone's history costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryPlan {
    /// Positions in one segment.
    pub positions_per_segment: f64,
    /// Writes of one segment (its flushes).
    pub writes_per_segment: f64,
    /// A whole segment as stored, bytes (system properties included).
    pub segment_bytes: f64,
    /// RU of all the writes of one segment.
    pub ru_per_segment: f64,
    /// RU a drone's history takes a day.
    pub ru_per_drone_day: f64,
    /// Bytes a drone's history adds a day.
    pub bytes_per_drone_day: f64,
    /// RU per position kept.
    pub ru_per_position: f64,
    /// Bytes per position kept.
    pub bytes_per_position: f64,
}

/// The cost of `history` for a drone reporting every `report_interval` and publishing every
/// `publish_interval`, under `policy`.
pub fn plan(
    history: &History,
    report_interval: Duration,
    publish_interval: Duration,
    policy: &IndexingPolicy,
) -> HistoryPlan {
    let span = history.segment_span.as_secs_f64();
    let interval = report_interval.as_secs_f64();
    let positions = (span / interval).max(1.0).floor();
    // A flush writes what arrived since the last one; positions arrive a message at a time.
    let flush = history
        .hold
        .max(publish_interval)
        .as_secs_f64()
        .min(span)
        .max(interval);
    let writes = (span / flush).ceil().clamp(1.0, positions);
    let per_write = (positions / writes).ceil() as usize;
    let (ru, bytes) = segment_cost(positions as usize, per_write, policy);
    let per_day = 86_400.0 / span;
    HistoryPlan {
        positions_per_segment: positions,
        writes_per_segment: writes,
        segment_bytes: bytes,
        ru_per_segment: ru,
        ru_per_drone_day: ru * per_day,
        bytes_per_drone_day: bytes * per_day,
        ru_per_position: ru / positions,
        bytes_per_position: bytes / positions,
    }
}

/// One flight of a drone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flight {
    /// How long the drone flies.
    pub length: Duration,
    /// How far into its first stretch the flight begins; `None`: any time (the average).
    pub phase: Option<Duration>,
}

/// What one flight's history costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlightHistory {
    /// Segments written.
    pub segments: f64,
    /// RU of all their writes.
    pub ru: f64,
    /// Their bytes as stored.
    pub bytes: f64,
}

/// The cost of `history` over one flight (the writes as [`plan`] has them).
///
/// The first and the last segment of a flight are partial. Each costs nearly a whole
/// segment's Create, so a flight of a few spans costs more per hour than [`plan`]'s
/// steady state. A flight that may begin any time touches `length ÷ span + 1` stretches on
/// average, its two partial segments holding one segment's positions between them.
pub fn plan_flight(
    history: &History,
    report_interval: Duration,
    publish_interval: Duration,
    policy: &IndexingPolicy,
    flight: Flight,
) -> FlightHistory {
    let steady = plan(history, report_interval, publish_interval, policy);
    let span = history.segment_span.as_secs_f64();
    // A stretch is written once per flush: a whole one `writes_per_segment` times.
    let flush = span / steady.writes_per_segment;
    let interval = report_interval.as_secs_f64();
    let length = flight.length.as_secs_f64();
    // The stretches the flight touches: (count, seconds of flight in each).
    let stretches: Vec<(f64, f64)> = match flight.phase {
        Some(phase) => {
            let first = (span - phase.as_secs_f64().min(span)).min(length);
            let whole = ((length - first) / span).floor();
            let last = length - first - whole * span;
            vec![(1.0, first), (whole, span), (1.0, last)]
        }
        None => {
            let whole = (length / span - 1.0).max(0.0);
            let partial = length / span + 1.0 - whole;
            vec![(whole, span), (partial, (length - whole * span) / partial)]
        }
    };
    let mut cost = FlightHistory {
        segments: 0.0,
        ru: 0.0,
        bytes: 0.0,
    };
    for (count, secs) in stretches {
        let points = secs / interval;
        if count <= 0.0 || points <= 0.0 {
            continue;
        }
        // Charges step by size: a fractional count of points, by interpolation.
        let (low, high) = (points.floor().max(1.0), points.ceil().max(1.0));
        let writes = (secs / flush - 1e-9).ceil().max(1.0);
        let at = |n: f64| segment_cost(n as usize, (n / writes).ceil() as usize, policy);
        let ((ru_low, bytes_low), (ru_high, bytes_high)) = (at(low), at(high));
        let t = (points - low).clamp(0.0, 1.0);
        cost.segments += count;
        cost.ru += count * (ru_low + (ru_high - ru_low) * t);
        cost.bytes += count * (bytes_low + (bytes_high - bytes_low) * t);
    }
    cost
}

/// The RU of writing a segment of `positions`, `per_write` at a time (a Create, then
/// Replaces with the points merged), and its bytes as stored at the end.
fn segment_cost(positions: usize, per_write: usize, policy: &IndexingPolicy) -> (f64, f64) {
    let mut ru = 0.0;
    let mut before: Option<Value> = None;
    let mut held = 0usize;
    while held < positions {
        held = (held + per_write.max(1)).min(positions);
        let after = segment(held);
        ru += match &before {
            None => charges::create(stored_len(&after), policy.terms(&after).len()),
            Some(old) => {
                let (old_terms, new_terms) = (policy.terms(old), policy.terms(&after));
                charges::replace(
                    stored_len(old),
                    stored_len(&after),
                    TermChanges {
                        removed: old_terms.difference(&new_terms).count(),
                        added: new_terms.difference(&old_terms).count(),
                    },
                )
            }
        };
        before = Some(after);
    }
    let bytes = stored_len(before.as_ref().expect("at least one position")) as f64;
    (ru, bytes)
}

/// A segment of `n` positions 5 s apart, every field present at the precision a GNSS fix
/// and the simulator give (the format of the writer's segments: `kind` "segment", points
/// `[seq, deviceTimeMs, lon, lat, altM, headingDeg, speedMps, batteryPct]`), `_ts` as stored.
fn segment(n: usize) -> Value {
    let start: u64 = 1_795_338_900_000;
    let points: Vec<Value> = (0..n as u64)
        .map(|i| {
            json!([
                1_830_000 + i,
                start + 2_500 + 5_000 * i,
                -122.349_312_345_678 + i as f64 * 1.234_567e-4,
                47.620_512_345_678 + i as f64 * 1.234_567e-4,
                121.512_345_678_9,
                270.123_456_789_1,
                12.345_678_901_2,
                81
            ])
        })
        .collect();
    json!({
        "id": "drone-00042:seg:1795338900000",
        "deviceId": "drone-00042",
        "kind": "segment",
        "schemaVersion": 1,
        "startMs": start,
        "endMs": start + 300_000,
        "firstSeq": 1_830_000,
        "lastSeq": 1_830_000 + n as u64 - 1,
        "n": n,
        "points": points,
        "ttl": 604_800,
        "_ts": 1_795_339_200u64 + n as u64,
    })
}

/// The bytes `doc` takes as stored: its JSON with the system properties.
fn stored_len(doc: &Value) -> usize {
    let mut doc = doc.clone();
    if let Some(fields) = doc.as_object_mut() {
        fields.remove("_ts");
    }
    doc.to_string().len() + SYSTEM_PROPERTIES.len()
}

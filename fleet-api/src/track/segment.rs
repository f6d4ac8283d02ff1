//! Positions from track segments (`kind: "segment"`): one document holds a drone's positions
//! whose device time falls in `[startMs, endMs)`, as `points` of
//! `[seq, deviceTimeMs, lon, lat, altM?, headingDeg?, speedMps?, batteryPct?]`, as cloud-writer
//! writes them. The reader takes `startMs` and `endMs` from each document and assumes no
//! segment length.
//!
//! Segments are read `TOP k … ORDER BY c.startMs` (ids are `{deviceId}:seg:{startMs}`, so
//! no two segments of a drone start together). When `k` came back, segments not read yet
//! start after the last one read, so the answer is complete up to that segment's start;
//! more are read (`k` from the positions per segment seen) until the page has `limit + 1`
//! positions there or the span ends.
//!
//! `ORDER BY c.startMs` needs `startMs` indexed. A container whose indexing policy predates
//! segments refuses it; such a container was never written segments by a writer that sets
//! the policy, so the page reads its history documents alone (and says so in the log once).

use std::sync::atomic::{AtomicBool, Ordering};

use cosmos::{CosmosError, QueryParameter, QueryRequest, ReadFailure};
use serde::Deserialize;
use serde_json::{Value, json};
use telemetry::PositionOrder;

use super::{Asker, Fetched, TrackPoint, TrackRequest};

/// Segments asked for first, before their size is known.
const FIRST_SEGMENTS: usize = 4;
/// Most segments one query asks for.
const MAX_SEGMENTS: usize = 100;

/// Whether the log said that the container cannot order segments.
static SAID_UNORDERED: AtomicBool = AtomicBool::new(false);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SegmentDocument {
    start_ms: i64,
    end_ms: i64,
    points: Vec<Vec<Value>>,
}

/// A point of a segment, `[seq, deviceTimeMs, lon, lat, …]` (4 to 8 elements).
fn point(values: &[Value]) -> Option<TrackPoint> {
    if !(4..=8).contains(&values.len()) {
        return None;
    }
    Some(TrackPoint {
        seq: values[0].as_u64()?,
        device_time_ms: values[1].as_i64()?,
        lon: values[2].as_f64()?,
        lat: values[3].as_f64()?,
    })
}

/// A segment's points; a point that is not one, or lies outside the segment's stretch, is
/// left out and logged.
fn decode(document: Value) -> Option<Vec<TrackPoint>> {
    let d: SegmentDocument = serde_json::from_value(document)
        .inspect_err(|e| tracing::warn!(error = %e, "a segment document lacks its stretch or points: left out"))
        .ok()?;
    let stretch = d.start_ms..d.end_ms;
    let mut points = Vec::with_capacity(d.points.len());
    for values in &d.points {
        match point(values) {
            Some(p) if stretch.contains(&p.device_time_ms) => points.push(p),
            _ => tracing::warn!(
                start_ms = d.start_ms,
                point = ?values,
                "a point of a segment is not [seq, deviceTimeMs, lon, lat, …] inside the segment's stretch: left out"
            ),
        }
    }
    Some(points)
}

/// The query for the first `top` segments of `device_id` that reach past `from` and start
/// before `until` (and after `start_after`, when given).
fn query(
    device_id: &str,
    top: usize,
    from: i64,
    until: i64,
    start_after: Option<i64>,
) -> QueryRequest {
    let param = |name: &str, value: Value| QueryParameter {
        name: name.to_string(),
        value,
    };
    let mut parameters = vec![
        param("@id", json!(device_id)),
        param("@kind", json!("segment")),
        param("@from", json!(from)),
        param("@until", json!(until)),
    ];
    let after = match start_after {
        Some(start) => {
            parameters.push(param("@after", json!(start)));
            " AND c.startMs > @after"
        }
        None => "",
    };
    QueryRequest {
        query: format!(
            "SELECT TOP {top} c.startMs, c.endMs, c.points FROM c \
             WHERE c.deviceId = @id AND c.kind = @kind \
             AND c.endMs > @from AND c.startMs < @until{after} \
             ORDER BY c.startMs"
        ),
        parameters,
    }
}

/// Whether the container refused to order by `startMs`: its indexing policy leaves it out.
fn order_unindexed(error: &CosmosError) -> bool {
    match error {
        CosmosError::Service(e) => {
            e.status == 400 && e.message.to_ascii_lowercase().contains("order-by item")
        }
        _ => false,
    }
}

/// The segment positions of a page.
pub(super) async fn fetch(
    asker: &mut Asker<'_>,
    request: &TrackRequest,
) -> Result<Fetched, ReadFailure> {
    let (from, until) = (request.first_ms(), request.span.until_ms);
    let mut fetched = Fetched::default();
    let mut start_after = None;
    let (mut read_segments, mut read_points) = (0usize, 0usize);
    let mut top = FIRST_SEGMENTS;
    loop {
        let asked = query(&request.device_id, top, from, until, start_after);
        let documents = match asker.ask(&asked).await {
            Ok(documents) => documents,
            Err(failure) if order_unindexed(&failure.source) => {
                if !SAID_UNORDERED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %failure.source, "the container does not index startMs: tracks are read from history documents alone (index /startMs/? and /endMs/? as deploy/cosmos/indexing-policy.json does)");
                }
                return Ok(Fetched::default());
            }
            Err(failure) => return Err(failure),
        };
        let cut = documents.len() >= top;
        for document in documents {
            // The order the query went by, also past a document that does not decode.
            let start = document.get("startMs").and_then(Value::as_i64);
            start_after = start.max(start_after);
            let Some(points) = decode(document) else {
                continue;
            };
            read_segments += 1;
            read_points += points.len();
            fetched
                .points
                .extend(points.into_iter().filter(|p| request.wants(p)));
        }
        let Some(last_start) = start_after.filter(|_| cut) else {
            fetched.complete_below = None;
            return Ok(fetched);
        };
        // Segments not read yet start after `last_start`.
        let bound = PositionOrder {
            device_time_ms: last_start + 1,
            seq: 0,
        };
        fetched.complete_below = Some(bound);
        let have = fetched.points.iter().filter(|p| p.order() < bound).count();
        if have > request.limit {
            return Ok(fetched);
        }
        let per_segment = (read_points / read_segments.max(1)).max(1);
        top = ((request.limit + 1 - have).div_ceil(per_segment) + 1).clamp(1, MAX_SEGMENTS);
    }
}

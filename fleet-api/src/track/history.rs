//! Positions from history documents, one a position (`kind: "history"`,
//! `id` = `{deviceId}:{seq}`): the format a container holds from before track segments.
//!
//! One query, `TOP limit+1 … ORDER BY c.deviceTimeMs` on the drone's partition (the filter
//! and the order use the indexed `deviceId`, `kind` and `deviceTimeMs`). When the `TOP` cut
//! the answer, positions at its last millisecond may be missing (ties are not ordered by
//! `seq`), so the answer is complete only below that millisecond. A page that would find
//! nothing below it (more than `limit` positions in one millisecond) reads that millisecond
//! whole.

use cosmos::{QueryParameter, QueryRequest, ReadFailure};
use serde::Deserialize;
use serde_json::{Value, json};
use telemetry::PositionOrder;

use super::{Asker, Fetched, TrackPoint, TrackRequest};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HistoryDocument {
    seq: u64,
    device_time_ms: i64,
    location: Location,
}

#[derive(Deserialize)]
struct Location {
    coordinates: Vec<f64>,
}

fn decode(document: Value) -> Option<TrackPoint> {
    let d: HistoryDocument = serde_json::from_value(document)
        .inspect_err(|e| tracing::warn!(error = %e, "a history document lacks the fields of a position: left out"))
        .ok()?;
    match d.location.coordinates[..] {
        [lon, lat, ..] => Some(TrackPoint {
            seq: d.seq,
            device_time_ms: d.device_time_ms,
            lon,
            lat,
        }),
        _ => None,
    }
}

/// The query for history documents of `device_id` from `from` to `until` (milliseconds,
/// `until` excluded), the first `top` of them when given.
fn query(device_id: &str, top: Option<usize>, from: i64, until: i64) -> QueryRequest {
    let top = top.map_or_else(String::new, |n| format!("TOP {n} "));
    let param = |name: &str, value: Value| QueryParameter {
        name: name.to_string(),
        value,
    };
    // The device id is also in the filter: the partition key header scopes the query on
    // Cosmos DB, and the filter keeps the answer right on servers that ignore it.
    QueryRequest {
        query: format!(
            "SELECT {top}c.seq, c.deviceTimeMs, c.location FROM c \
             WHERE c.deviceId = @id AND c.kind = @kind \
             AND c.deviceTimeMs >= @from AND c.deviceTimeMs < @until \
             ORDER BY c.deviceTimeMs"
        ),
        parameters: vec![
            param("@id", json!(device_id)),
            param("@kind", json!("history")),
            param("@from", json!(from)),
            param("@until", json!(until)),
        ],
    }
}

/// The history positions of a page.
pub(super) async fn fetch(
    asker: &mut Asker<'_>,
    request: &TrackRequest,
) -> Result<Fetched, ReadFailure> {
    let cap = request.limit + 1;
    let until = request.span.until_ms;
    let mut from = request.first_ms();
    loop {
        let documents = asker
            .ask(&query(&request.device_id, Some(cap), from, until))
            .await?;
        let cut = documents.len() >= cap;
        // The order the query went by, also past a document that does not decode.
        let last_ms = documents
            .iter()
            .filter_map(|d| d.get("deviceTimeMs").and_then(Value::as_i64))
            .max();
        let points: Vec<TrackPoint> = documents.into_iter().filter_map(decode).collect();
        let Some(last_ms) = last_ms.filter(|_| cut) else {
            let points = points.into_iter().filter(|p| request.wants(p)).collect();
            return Ok(Fetched {
                points,
                complete_below: None,
            });
        };
        let points: Vec<TrackPoint> = points.into_iter().filter(|p| request.wants(p)).collect();
        if points.iter().any(|p| p.device_time_ms < last_ms) {
            return Ok(Fetched {
                points,
                complete_below: Some(PositionOrder {
                    device_time_ms: last_ms,
                    seq: 0,
                }),
            });
        }
        // Nothing wanted before the last millisecond: read it whole.
        let whole = asker
            .ask(&query(&request.device_id, None, last_ms, last_ms + 1))
            .await?;
        let points: Vec<TrackPoint> = whole
            .into_iter()
            .filter_map(decode)
            .filter(|p| request.wants(p))
            .collect();
        if !points.is_empty() {
            return Ok(Fetched {
                points,
                complete_below: Some(PositionOrder {
                    device_time_ms: last_ms + 1,
                    seq: 0,
                }),
            });
        }
        from = last_ms + 1;
    }
}

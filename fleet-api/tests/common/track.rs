//! Tracks for the API's tests: positions a drone sent, stored as the two history formats
//! (segment documents written here as JSON following the segment format, not by an encoder
//! of the project; history documents by the writer's own `DocumentLayout`), and a track read
//! by following its pages.

use chrono::{DateTime, Utc};
use cosmos::{ContainerClient, ContainerSetup, CosmosClient};
use serde_json::{Value, json};
use telemetry::{DocumentLayout, Position};

use super::get;

/// A position a drone sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sent {
    pub seq: u64,
    pub ms: i64,
    pub lon: f64,
    pub lat: f64,
}

/// `n` positions from `seq` 1, `every_ms` apart from `start_ms`, along a line from `from`.
pub fn flight(n: u64, start_ms: i64, every_ms: i64, from: (f64, f64)) -> Vec<Sent> {
    (0..n)
        .map(|i| Sent {
            seq: i + 1,
            ms: start_ms + i as i64 * every_ms,
            lon: from.0 + i as f64 * 0.0005,
            lat: from.1 + (i as f64 * 0.2).sin() * 0.002,
        })
        .collect()
}

/// The indexing policy the segment format names: `deviceId`, `kind`, `deviceTimeMs`,
/// `startMs`, `endMs` indexed, `points` not, a spatial index on `location`.
pub fn segment_indexing_policy() -> Value {
    json!({
        "indexingMode": "consistent",
        "automatic": true,
        "includedPaths": [
            {"path": "/kind/?"}, {"path": "/deviceId/?"}, {"path": "/deviceTimeMs/?"},
            {"path": "/startMs/?"}, {"path": "/endMs/?"}
        ],
        "excludedPaths": [{"path": "/points/*"}, {"path": "/*"}],
        "spatialIndexes": [{"path": "/location/*", "types": ["Point"]}]
    })
}

/// A container keyed on `/deviceId` with [`segment_indexing_policy`].
pub async fn segment_container(client: &CosmosClient, name: &str) -> ContainerClient {
    let container = client.container("telemetry", name);
    let setup = ContainerSetup::new("/deviceId").with_indexing_policy(segment_indexing_policy());
    container.create_if_missing(&setup).await.unwrap();
    container
}

/// A point of a segment: `[seq, deviceTimeMs, lon, lat, altM, headingDeg, speedMps,
/// batteryPct]`, the optional fields `null` when absent and trailing ones left out (which
/// ones a position has varies with its `seq`, so every length from 4 to 8 occurs).
fn point(p: &Sent) -> Value {
    let mut values = vec![json!(p.seq), json!(p.ms), json!(p.lon), json!(p.lat)];
    let optional = match p.seq % 5 {
        0 => vec![],
        1 => vec![json!(120.5)],
        2 => vec![json!(120.5), Value::Null, json!(11.0)],
        3 => vec![Value::Null, json!(270.0), Value::Null, json!(81)],
        _ => vec![json!(99.0), json!(10.0), json!(12.3)],
    };
    values.extend(optional);
    Value::Array(values)
}

/// The segment documents of `device` holding `sent`, each the positions of one stretch of
/// `stretch_ms` (device time floored to it).
pub fn segments(device: &str, sent: &[Sent], stretch_ms: i64) -> Vec<Value> {
    let mut stretches: std::collections::BTreeMap<i64, Vec<Sent>> = Default::default();
    for p in sent {
        stretches
            .entry(p.ms.div_euclid(stretch_ms) * stretch_ms)
            .or_default()
            .push(*p);
    }
    stretches
        .into_iter()
        .map(|(start, mut points)| {
            points.sort_by_key(|p| p.seq);
            json!({
                "id": format!("{device}:seg:{start}"),
                "deviceId": device,
                "kind": "segment",
                "schemaVersion": 1,
                "startMs": start,
                "endMs": start + stretch_ms,
                "firstSeq": points[0].seq,
                "lastSeq": points[points.len() - 1].seq,
                "n": points.len(),
                "points": points.iter().map(point).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// Writes `documents` to `device`'s partition.
pub async fn write(container: &ContainerClient, device: &str, documents: &[Value]) {
    for d in documents {
        container
            .upsert(device, &serde_json::to_vec(d).unwrap())
            .await
            .unwrap();
    }
}

/// The history documents (one a position) of `device` holding `sent`, as the writer wrote
/// them before segments.
pub fn history(device: &str, sent: &[Sent]) -> Vec<Value> {
    let layout = DocumentLayout::default();
    sent.iter()
        .map(|p| {
            let position = Position {
                device_id: device.to_string(),
                seq: p.seq,
                ts: DateTime::<Utc>::from_timestamp_millis(p.ms).unwrap(),
                lat: p.lat,
                lon: p.lon,
                alt_m: None,
                heading_deg: None,
                speed_mps: None,
                battery_pct: None,
                gnss: Default::default(),
            };
            layout.history(&position, None, None)
        })
        .collect()
}

/// A track read page by page.
#[derive(Debug, Default)]
pub struct Followed {
    /// Every position, in the order answered.
    pub sent: Vec<Sent>,
    /// Positions of each page.
    pub pages: Vec<usize>,
    /// RU charged for each page.
    pub charges: Vec<f64>,
    /// Cosmos DB calls of each page.
    pub calls: Vec<u32>,
}

/// Reads `{base}/api/drones/{device}/track?{query}` and the pages after it, as a client
/// does: each page asked with the continuation of the one before (and `limit`, if `query`
/// names one).
pub async fn follow(base: &str, device: &str, query: &[(&str, &str)]) -> Followed {
    let url = format!("{base}/api/drones/{device}/track");
    let limit: Vec<(&str, &str)> = query
        .iter()
        .filter(|(k, _)| *k == "limit")
        .copied()
        .collect();
    let mut next = url::Url::parse_with_params(&url, query).unwrap();
    let mut followed = Followed::default();
    loop {
        let got = get(next.as_str()).await;
        assert_eq!(got.status, 200, "{next}: {}", got.body);
        let p = &got.body["properties"];
        let seqs: Vec<u64> = serde_json::from_value(p["seq"].clone()).unwrap();
        let times: Vec<String> = serde_json::from_value(p["deviceTimes"].clone()).unwrap();
        let coordinates: Vec<Vec<f64>> = match got.body["geometry"]["type"].as_str() {
            None => vec![],
            Some("Point") => {
                vec![serde_json::from_value(got.body["geometry"]["coordinates"].clone()).unwrap()]
            }
            Some(_) => serde_json::from_value(got.body["geometry"]["coordinates"].clone()).unwrap(),
        };
        assert_eq!(seqs.len(), coordinates.len(), "{}", got.body);
        assert_eq!(p["points"], seqs.len(), "{}", got.body);
        for ((seq, time), c) in seqs.iter().zip(&times).zip(&coordinates) {
            followed.sent.push(Sent {
                seq: *seq,
                ms: time.parse::<DateTime<Utc>>().unwrap().timestamp_millis(),
                lon: c[0],
                lat: c[1],
            });
        }
        followed.pages.push(seqs.len());
        followed.charges.push(got.charge);
        followed.calls.push(got.calls);
        let Some(token) = p["continuation"].as_str() else {
            return followed;
        };
        assert!(followed.pages.len() < 1000, "the pages do not end");
        let mut params = vec![("continuation", token)];
        params.extend_from_slice(&limit);
        next = url::Url::parse_with_params(&url, &params).unwrap();
    }
}

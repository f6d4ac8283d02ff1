//! The demo's history as stored: the bytes of the container's history documents, one per
//! position (`kind` "history") or track segments (`kind` "segment"), and each drone's
//! flight as its segments hold it, read back after the flight. Read once at the end: its
//! query costs RU the run's figures do not count.

use std::collections::BTreeMap;

use cosmos::{
    CosmosClient, CosmosConfig, CosmosError, Credential, MasterKey, QueryRequest, QueryScope,
};
use cosmos_sim::CosmosSim;
use serde_json::Value;

use super::{CONTAINER, DATABASE};

/// The history documents as the endpoint stores them.
#[derive(Debug, Clone, Default)]
pub(super) struct StoredHistory {
    /// The bytes of every history document (system properties included).
    pub(super) bytes: u64,
    /// Per drone with segments, its flight as they hold it.
    pub(super) flights: Vec<DroneFlight>,
}

/// A drone's positions in its segments: the device times of its first and last, and how
/// many.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct DroneFlight {
    pub(super) first_ms: i64,
    pub(super) last_ms: i64,
    pub(super) positions: u64,
}

/// The history documents in the demo's container, as the endpoint answers them.
pub(super) async fn stored(sim: &CosmosSim) -> Result<StoredHistory, CosmosError> {
    let key = MasterKey::from_base64(sim.key()).expect("the endpoint's key is base64");
    let client = CosmosClient::new(CosmosConfig::new(
        sim.endpoint().parse().expect("the endpoint is a URL"),
        Credential::MasterKey(key),
    ))?;
    let query = QueryRequest {
        query: "SELECT * FROM c WHERE c.kind = 'history' OR c.kind = 'segment'".into(),
        parameters: Vec::new(),
    };
    let answer = client
        .container(DATABASE, CONTAINER)
        .query(&query, QueryScope::AllRanges)
        .await?;
    let mut flights: BTreeMap<&str, DroneFlight> = BTreeMap::new();
    for doc in answer.documents.iter().filter(|d| d["kind"] == "segment") {
        let Some(device) = doc["deviceId"].as_str() else {
            continue;
        };
        // A point is `[seq, deviceTimeMs, ...]`.
        let times = doc["points"].as_array().into_iter().flatten();
        for time in times.filter_map(|p| p.get(1).and_then(Value::as_i64)) {
            let flight = flights.entry(device).or_insert(DroneFlight {
                first_ms: time,
                last_ms: time,
                positions: 0,
            });
            flight.first_ms = flight.first_ms.min(time);
            flight.last_ms = flight.last_ms.max(time);
            flight.positions += 1;
        }
    }
    Ok(StoredHistory {
        bytes: answer
            .documents
            .iter()
            .map(|doc| doc.to_string().len() as u64)
            .sum(),
        flights: flights.into_values().collect(),
    })
}

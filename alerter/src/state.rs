//! The judging state of each drone ([`DroneState`]), kept in the lease container as one
//! document per drone (`state.{document id}`), so that a restarted instance, or the one that
//! took a lease over, judges the next position as the last owner would have.
//!
//! The document is also the drone's outbox: alerts are written into it (`pending`, with the
//! state they lead to) before they are delivered, and cleared after. The feed gives only a
//! drone's latest position, so an alert lost between delivery and the state write could not
//! be judged again from a replay; from the outbox it is delivered again, with its id. A
//! follower delivers a range's pending alerts when it takes the range.
//!
//! Cost (RU): a drone's state is read once when its range's owner first sees it (a point
//! read, 1 RU, also when there is none); written when it changed without an alert (a fence
//! side first seen, a battery rearmed), and twice per alert (outbox, then cleared). Only
//! `kind` is indexed. Between alerts a position costs the lease container nothing.

use cosmos::{ContainerClient, CosmosError, QueryRequest, QueryScope};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::judge::DroneState;

/// The states in the lease container.
#[derive(Debug, Clone)]
pub struct StateStore {
    container: ContainerClient,
}

/// A drone's state document.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stored {
    id: String,
    kind: String,
    /// The drone.
    pub device_id: String,
    /// Its judging state.
    #[serde(flatten)]
    pub state: DroneState,
    /// Alerts written but not yet known delivered, as CloudEvents.
    #[serde(default)]
    pub pending: Vec<Value>,
}

fn doc_id(device_id: &str) -> String {
    format!("state.{}", telemetry::document::document_id(device_id))
}

impl StateStore {
    /// The states in `container`.
    pub fn new(container: ContainerClient) -> Self {
        StateStore { container }
    }

    /// The state of `device_id` (the default when none was written) and the RU.
    pub async fn read(&self, device_id: &str) -> Result<(Stored, f64), CosmosError> {
        let id = doc_id(device_id);
        match self.container.read(id.as_str(), &id).await? {
            Some(read) => Ok((read.json()?, read.request_charge)),
            // A miss costs about what a read does.
            None => Ok((
                Stored {
                    id,
                    kind: "state".into(),
                    device_id: device_id.to_string(),
                    state: DroneState::default(),
                    pending: Vec::new(),
                },
                1.0,
            )),
        }
    }

    /// Every state with pending alerts, and the RU.
    pub async fn pending(&self) -> Result<(Vec<Stored>, f64), CosmosError> {
        let query = QueryRequest {
            query: "SELECT * FROM c WHERE c.kind = 'state' AND ARRAY_LENGTH(c.pending) > 0".into(),
            parameters: Vec::new(),
        };
        let answer = self.container.query(&query, QueryScope::AllRanges).await?;
        let states = answer
            .documents
            .into_iter()
            .filter_map(|d| serde_json::from_value(d).ok())
            .collect();
        Ok((states, answer.request_charge))
    }

    /// Writes the state of `device_id` with `pending` alerts; the RU.
    pub async fn write(
        &self,
        device_id: &str,
        state: &DroneState,
        pending: &[Value],
    ) -> Result<f64, CosmosError> {
        let doc = Stored {
            id: doc_id(device_id),
            kind: "state".into(),
            device_id: device_id.to_string(),
            state: state.clone(),
            pending: pending.to_vec(),
        };
        let body = serde_json::to_vec(&doc).expect("a state serializes");
        Ok(self
            .container
            .upsert(doc.id.as_str(), &body)
            .await?
            .request_charge)
    }
}

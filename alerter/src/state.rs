//! The judging state of each drone ([`DroneState`]), kept in the lease container as one
//! document per drone (`state.{document id}`), so that a restarted instance, or the one that
//! took a lease over, judges the next position as the last owner would have.
//!
//! Cost (RU): a drone's state is read once when its range's owner first sees it (a point
//! read, 1 RU, also when there is none), and written only when it changed: a crossing, a
//! battery threshold, a silence; about 6 RU per alert. Between alerts a position costs the
//! lease container nothing.

use cosmos::{ContainerClient, CosmosError};
use serde::{Deserialize, Serialize};

use crate::judge::DroneState;

/// The states in the lease container.
#[derive(Debug, Clone)]
pub struct StateStore {
    container: ContainerClient,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StateDoc {
    id: String,
    kind: String,
    device_id: String,
    #[serde(flatten)]
    state: DroneState,
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
    pub async fn read(&self, device_id: &str) -> Result<(DroneState, f64), CosmosError> {
        let id = doc_id(device_id);
        match self.container.read(id.as_str(), &id).await? {
            Some(read) => {
                let doc: StateDoc = read.json()?;
                Ok((doc.state, read.request_charge))
            }
            // A miss costs about what a read does.
            None => Ok((DroneState::default(), 1.0)),
        }
    }

    /// Writes the state of `device_id`; the RU.
    pub async fn write(&self, device_id: &str, state: &DroneState) -> Result<f64, CosmosError> {
        let doc = StateDoc {
            id: doc_id(device_id),
            kind: "state".into(),
            device_id: device_id.to_string(),
            state: state.clone(),
        };
        let body = serde_json::to_vec(&doc).expect("a state serializes");
        Ok(self
            .container
            .upsert(doc.id.as_str(), &body)
            .await?
            .request_charge)
    }
}

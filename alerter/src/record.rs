//! The alerts delivered or dead-lettered, one document each in the lease container
//! (`alert.{id}`, `kind` `alert`), kept for a week (`ttl`), so that fleet-api lists the last
//! ones (`GET /api/alerts`) with no alerter to ask. A replayed alert overwrites its record.
//!
//! Cost: one upsert per alert (about 6 RU for a 1 KB document, `kind` and `recordedAtMs`
//! indexed).

use cosmos::{ContainerClient, CosmosError};
use serde_json::{Value, json};

use crate::lease::now_ms;
use crate::metrics::Outcome;

/// How long a record is kept, seconds.
const KEEP_S: i64 = 7 * 24 * 3600;

/// The records in the lease container.
#[derive(Debug, Clone)]
pub struct Records {
    container: ContainerClient,
}

impl Records {
    /// The records in `container`.
    pub fn new(container: ContainerClient) -> Self {
        Records { container }
    }

    /// Records `event` with its outcome; the RU.
    pub async fn write(&self, event: &Value, outcome: Outcome) -> Result<f64, CosmosError> {
        let id = format!("alert.{}", event["id"].as_str().unwrap_or_default());
        let doc = json!({
            "id": id, "kind": "alert", "event": event, "outcome": outcome.label(),
            "recordedAtMs": now_ms(), "ttl": KEEP_S,
        });
        let body = serde_json::to_vec(&doc).expect("a record serializes");
        Ok(self
            .container
            .upsert(id.as_str(), &body)
            .await?
            .request_charge)
    }
}

//! The ETag mode's read path: read what is stored for the position's drone (its
//! document's order, `deviceTimeMs` and `seq`, and ETag, by a query on its logical
//! partition: a point read of a missing document fails on some servers instead of
//! answering 404), inside the in-flight limit and at most [`MAX_READS`] at once; then
//! Replace with its ETag, Create, or find the position superseded
//! ([`super::newest_wins::after_read`]).

use std::sync::Arc;
use std::time::Duration;

use cosmos::{ContainerClient, CosmosError, QueryParameter, QueryRequest, QueryScope};
use telemetry::PositionOrder;

use super::driver::WriteEngine;
use super::in_flight::{Parked, Pending};
use super::newest_wins::{self, AfterRead, Final, Step};
use super::refusal::{self, Refusal};

/// Point reads in flight at once (ETag mode).
pub(super) const MAX_READS: usize = 64;
/// Pause before reading again after a read failed for a reason that holds nothing (e.g.
/// an unreadable answer), so that such a failure does not spin.
const READ_RETRY_PAUSE: Duration = Duration::from_millis(100);

impl WriteEngine {
    /// ETag mode: reads the stored document, then replaces, creates, or finds the
    /// position superseded.
    pub(super) fn read_then_write(self: Arc<Self>, mut pending: Box<Pending>) {
        tokio::spawn(async move {
            if !newest_wins::take_round(&mut pending.rounds) {
                self.finish(*pending, Final::Failed, None);
                return;
            }
            let read = {
                let _permit = self.reads.acquire().await;
                let device = &pending.position.device_id;
                read_stored(&self.container, &self.read_query, device, &pending.doc_id).await
            };
            let refusal = match &read {
                Ok(_) => Refusal::None,
                Err(err) => refusal::of_error(err),
            };
            match refusal {
                Refusal::Hold(cause) => return self.park(Parked::Latest(pending, None), cause),
                Refusal::None | Refusal::Again | Refusal::Document(_) => {
                    self.answered(&mut pending.probe);
                }
            }
            let stored = match read {
                Ok(stored) => stored,
                Err(err) => {
                    tracing::warn!(device = %pending.position.device_id, error = %err, "reading the stored document failed; retrying");
                    tokio::time::sleep(READ_RETRY_PAUSE).await;
                    self.retry_or_stale(pending, None).await;
                    return;
                }
            };
            let step =
                match newest_wins::after_read(stored.as_ref().map(|s| s.order), pending.order) {
                    AfterRead::Superseded => {
                        if let Some(stored) = stored {
                            self.high_water
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .raise(&pending.position.device_id, stored.order, stored.etag);
                        }
                        return self.finish(*pending, Final::Superseded, None);
                    }
                    AfterRead::Replace => {
                        pending.if_match = stored.and_then(|s| s.etag);
                        Step::Replace
                    }
                    AfterRead::Create => Step::Create,
                };
            let op = self.op(pending, step);
            self.submit(op).await;
        });
    }
}

/// What is stored for a drone.
#[derive(Debug)]
struct Stored {
    /// The stored position's order.
    order: PositionOrder,
    /// Its ETag.
    etag: Option<String>,
}

/// The order fields and ETag of a stored document.
#[derive(serde::Deserialize)]
struct StoredOrder {
    #[serde(rename = "deviceTimeMs")]
    device_time_ms: i64,
    seq: u64,
    #[serde(rename = "_etag")]
    etag: Option<String>,
}

/// The query of a stored document's order and ETag. It names the partition key in its
/// filter too: some servers refuse single-partition queries that do not.
pub(super) fn read_query(pk_path: &telemetry::PartitionKeyPath) -> String {
    let mut pk = String::from("c");
    for segment in pk_path.segments() {
        if segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            pk.push('.');
            pk.push_str(segment);
        } else {
            pk.push_str(&format!("[{}]", serde_json::Value::from(segment.as_str())));
        }
    }
    format!("SELECT c.deviceTimeMs, c.seq, c._etag FROM c WHERE c.id = @id AND {pk} = @pk")
}

/// Reads the stored order and ETag of document `doc_id` of drone `device_id` with `query`
/// (from [`read_query`]); `None` when there is no document.
async fn read_stored(
    container: &ContainerClient,
    query: &str,
    device_id: &str,
    doc_id: &str,
) -> Result<Option<Stored>, CosmosError> {
    let query = QueryRequest {
        query: query.to_owned(),
        parameters: vec![
            QueryParameter {
                name: "@id".into(),
                value: doc_id.into(),
            },
            QueryParameter {
                name: "@pk".into(),
                value: device_id.into(),
            },
        ],
    };
    let response = container
        .query(&query, QueryScope::Partition(device_id.to_owned()))
        .await?;
    let Some(doc) = response.documents.into_iter().next() else {
        return Ok(None);
    };
    let stored: StoredOrder =
        serde_json::from_value(doc).map_err(|source| CosmosError::Decode {
            what: "stored position",
            source,
        })?;
    Ok(Some(Stored {
        order: PositionOrder {
            device_time_ms: stored.device_time_ms,
            seq: stored.seq,
        },
        etag: stored.etag,
    }))
}

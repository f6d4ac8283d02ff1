//! The ETag mode's read, which the write engine runs ([`super::engine`]): read what is stored for the position's drone (its
//! document's order, `deviceTimeMs` and `seq`, and ETag, by a query on its logical
//! partition: a point read of a missing document fails on some servers instead of
//! answering 404), inside the in-flight limit and at most [`MAX_READS`] at once; then
//! Replace with its ETag, Create, or find the position superseded
//! ([`super::newest_wins::after_read`]).

use std::time::Duration;

use cosmos::{ContainerClient, CosmosError, QueryParameter, QueryRequest, QueryScope};
use telemetry::PositionOrder;

/// Point reads in flight at once (ETag mode).
pub(super) const MAX_READS: usize = 64;
/// Pause before reading again after a read failed for a reason that holds nothing (e.g.
/// an unreadable answer), so that such a failure does not spin.
pub(super) const READ_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What is stored for a drone.
#[derive(Debug)]
pub(super) struct Stored {
    /// The stored position's order.
    pub(super) order: PositionOrder,
    /// Its ETag.
    pub(super) etag: Option<String>,
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
pub(super) async fn read_stored(
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

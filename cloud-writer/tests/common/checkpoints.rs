//! The SDK's checkpoint store contract as the tests of both stores (Cosmos DB, Blob
//! Storage) check it: checkpoints written in a scope and listed back, ownerships listed.

use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::Checkpoint;
use cloud_writer::internals::Scope;

/// Writes a checkpoint of each `(partition, sequence number)` in `scope`, in order, its
/// offset a hundred times its sequence number.
pub async fn write_checkpoints(
    store: &impl CheckpointStore,
    scope: &Scope,
    checkpoints: &[(&str, i64)],
) {
    for &(partition, seq) in checkpoints {
        store
            .update_checkpoint(scope.checkpoint(
                partition,
                Some(seq),
                Some(format!("{}", seq * 100)),
            ))
            .await
            .unwrap();
    }
}

/// Checks that `store` lists no ownership for `namespace`, `hub` and `group`.
pub async fn assert_no_ownerships(
    store: &impl CheckpointStore,
    namespace: &str,
    hub: &str,
    group: &str,
) {
    let listed = store.list_ownerships(namespace, hub, group).await.unwrap();
    assert!(listed.is_empty(), "{listed:?}");
}

/// The checkpoints `store` lists for `namespace`, `hub` and `group`, by partition.
pub async fn listed_checkpoints(
    store: &impl CheckpointStore,
    namespace: &str,
    hub: &str,
    group: &str,
) -> Vec<Checkpoint> {
    let mut listed = store.list_checkpoints(namespace, hub, group).await.unwrap();
    listed.sort_by(|x, y| x.partition_id.cmp(&y.partition_id));
    listed
}

/// `(partition, sequence number, offset)` of each checkpoint.
pub fn positions(checkpoints: &[Checkpoint]) -> Vec<(&str, Option<i64>, Option<&str>)> {
    checkpoints
        .iter()
        .map(|c| {
            (
                c.partition_id.as_str(),
                c.sequence_number,
                c.offset.as_deref(),
            )
        })
        .collect()
}

//! What an operator does with checkpoints by hand (`cloud-writer checkpoints show|copy`):
//! read a consumer group's checkpoints and ownerships from either store, and copy the
//! checkpoints from one store to the other (to move from the Cosmos container to Blob
//! Storage, or to hand over to or take over from any Event Hubs SDK's blob store). Through
//! the SDK's [`CheckpointStore`] trait alone, so any store reads and writes the same way.

use std::collections::BTreeMap;

use azure_messaging_eventhubs::CheckpointStore;

use super::store::Scope;

/// One partition's checkpoint and owner, as a store holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionState {
    /// The last event whose outcome is final, by sequence number.
    pub sequence_number: Option<i64>,
    /// Its offset.
    pub offset: Option<String>,
    /// The replica that owns the partition, if any.
    pub owner: Option<String>,
}

/// Every partition `store` knows of in `scope`, by partition id (numerically ordered
/// where the ids are numbers).
pub async fn show(
    store: &dyn CheckpointStore,
    scope: &Scope,
) -> azure_core::Result<BTreeMap<PartitionId, PartitionState>> {
    let (namespace, hub, group) = (&scope.namespace, &scope.event_hub, &scope.consumer_group);
    let mut partitions: BTreeMap<PartitionId, PartitionState> = BTreeMap::new();
    for checkpoint in store.list_checkpoints(namespace, hub, group).await? {
        let state = partitions
            .entry(PartitionId(checkpoint.partition_id))
            .or_default();
        state.sequence_number = checkpoint.sequence_number;
        state.offset = checkpoint.offset;
    }
    for ownership in store.list_ownerships(namespace, hub, group).await? {
        partitions
            .entry(PartitionId(ownership.partition_id))
            .or_default()
            .owner = ownership.owner_id.filter(|o| !o.is_empty());
    }
    Ok(partitions)
}

/// Writes every checkpoint of `scope` that `from` holds into `to`; returns the partitions
/// copied. Ownerships are not copied: the replicas reading `to` claim the partitions afresh.
pub async fn copy(
    from: &dyn CheckpointStore,
    to: &dyn CheckpointStore,
    scope: &Scope,
) -> azure_core::Result<Vec<String>> {
    let checkpoints = from
        .list_checkpoints(&scope.namespace, &scope.event_hub, &scope.consumer_group)
        .await?;
    let mut copied = Vec::with_capacity(checkpoints.len());
    for checkpoint in checkpoints {
        copied.push(checkpoint.partition_id.clone());
        to.update_checkpoint(checkpoint).await?;
    }
    copied.sort_by_key(|p| PartitionId(p.clone()));
    Ok(copied)
}

/// A partition id, ordered as numbers when both are (`2` before `10`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionId(pub String);

impl Ord for PartitionId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self.0.parse::<u64>(), other.0.parse::<u64>()) {
            (Ok(a), Ok(b)) => a.cmp(&b).then_with(|| self.0.cmp(&other.0)),
            _ => self.0.cmp(&other.0),
        }
    }
}

impl PartialOrd for PartitionId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for PartitionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

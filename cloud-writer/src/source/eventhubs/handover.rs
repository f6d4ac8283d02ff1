//! Taking a partition from a replica that still reads it without reading again what that
//! replica finished: the checkpoint store as the SDK's processor sees it ([`Handovers`]).
//!
//! The processor claims a partition from another current owner when balancing moves it
//! (a replica started, or one above its share), then lists the checkpoints and opens the
//! partition from its checkpoint at once. The previous owner reads on until it sees the
//! takeover (its watch lists the ownerships every second: [`super::takeover`]), then
//! checkpoints what it finished; everything between the checkpoint the new owner started
//! from and that last one would be read twice (up to a checkpoint interval's events,
//! written to Cosmos DB twice: 2.5 to 12.5 % of the stream in rolling restarts and scaling
//! on 32 partitions). So after a claim that took a partition from another current owner,
//! the checkpoint listing the processor opens it with waits until that partition's
//! checkpoint moves (the previous owner's last one), at most [`WAIT`]; the partition is
//! then read from there. A partition already checkpointed at its last enqueued event (by
//! the lag monitor's latest poll, one balancing interval old at most) has nothing to hand
//! over and is not waited for.
//!
//! Its cost: the processor's balancing round, and so the moved partitions, wait up to
//! [`WAIT`] longer, and the checkpoints are listed every [`POLL`] meanwhile (a query of
//! about 3 RU on the Cosmos store, a listing on Blob Storage).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use azure_core::time::OffsetDateTime;
use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::{Checkpoint, Ownership};

use super::lag::Enqueued;
use super::stores::Store;

/// Longest wait for a moved partition's last checkpoint: the previous owner's ownership
/// listing (every second) and its checkpoint write, with room for a busy machine.
const WAIT: Duration = Duration::from_millis(2000);
/// How often the checkpoints are listed meanwhile.
const POLL: Duration = Duration::from_millis(100);

/// The checkpoint store as this replica's processor uses it, and which partitions it last
/// claimed from another current owner.
#[derive(Debug)]
pub(super) struct Handovers {
    store: Store,
    owner: String,
    expiry: Duration,
    enqueued: Enqueued,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The partitions another current owner holds, by the last listing.
    others: HashSet<String>,
    /// Partitions claimed from another current owner since the checkpoints were listed.
    moved: HashSet<String>,
}

impl Handovers {
    /// `store` as this replica's processor (`owner`) uses it, ownerships holding `expiry`,
    /// the partitions' last events as `enqueued` has them.
    pub(super) fn new(
        store: Store,
        owner: String,
        expiry: Duration,
        enqueued: Enqueued,
    ) -> Handovers {
        Handovers {
            store,
            owner,
            expiry,
            enqueued,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether a partition whose last enqueued event is `last` (unknown: `None`) may hold
/// events after `checkpoint` that its previous owner read.
fn unfinished(last: Option<i64>, checkpoint: Option<i64>) -> bool {
    match (last, checkpoint) {
        (None, _) => true,
        (Some(last), None) => last >= 0,
        (Some(last), Some(checkpoint)) => last > checkpoint,
    }
}

/// Whether the checkpoint of every one of `moved` differs in `now` from `before`.
fn all_moved(
    moved: &HashSet<String>,
    before: &HashMap<String, Option<i64>>,
    now: &[Checkpoint],
) -> bool {
    moved.iter().all(|partition| {
        let current = now
            .iter()
            .find(|c| &c.partition_id == partition)
            .and_then(|c| c.sequence_number);
        current != before.get(partition).copied().flatten()
    })
}

#[async_trait::async_trait]
impl CheckpointStore for Handovers {
    async fn claim_ownership(
        &self,
        ownerships: &[Ownership],
    ) -> azure_core::Result<Vec<Ownership>> {
        let claimed = self.store.claim_ownership(ownerships).await?;
        let mut state = self.state();
        for ownership in &claimed {
            if state.others.contains(&ownership.partition_id) {
                state.moved.insert(ownership.partition_id.clone());
            }
        }
        Ok(claimed)
    }

    async fn list_checkpoints(
        &self,
        namespace: &str,
        event_hub_name: &str,
        consumer_group: &str,
    ) -> azure_core::Result<Vec<Checkpoint>> {
        let list = || {
            self.store
                .list_checkpoints(namespace, event_hub_name, consumer_group)
        };
        let first = list().await?;
        let mut moved = std::mem::take(&mut self.state().moved);
        let before: HashMap<String, Option<i64>> = moved
            .iter()
            .map(|p| {
                let checkpoint = first.iter().find(|c| &c.partition_id == p);
                (p.clone(), checkpoint.and_then(|c| c.sequence_number))
            })
            .collect();
        moved.retain(|p| unfinished(self.enqueued.last(p), before[p]));
        if moved.is_empty() {
            return Ok(first);
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut last = first;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
            // A listing that fails while waiting ends the wait, not the processor's round.
            last = match list().await {
                Ok(listed) => listed,
                Err(err) => {
                    tracing::debug!(error = %err, "checkpoints not listed: the moved partitions open at the last listing");
                    return Ok(last);
                }
            };
            if all_moved(&moved, &before, &last) {
                tracing::debug!(partitions = ?moved, "moved partitions: the previous owners' last checkpoints are in");
                return Ok(last);
            }
        }
        tracing::info!(partitions = ?moved, waited = ?WAIT, "moved partitions without a later checkpoint from their previous owner: what it had not finished is read again");
        Ok(last)
    }

    async fn list_ownerships(
        &self,
        namespace: &str,
        event_hub_name: &str,
        consumer_group: &str,
    ) -> azure_core::Result<Vec<Ownership>> {
        let ownerships = self
            .store
            .list_ownerships(namespace, event_hub_name, consumer_group)
            .await?;
        let now = OffsetDateTime::now_utc();
        let others = ownerships
            .iter()
            .filter_map(|o| {
                let owner = o.owner_id.as_deref().filter(|owner| !owner.is_empty())?;
                let current = o
                    .last_modified_time
                    .is_some_and(|at| now - at < self.expiry);
                (owner != self.owner && current).then(|| o.partition_id.clone())
            })
            .collect();
        self.state().others = others;
        Ok(ownerships)
    }

    async fn update_checkpoint(&self, checkpoint: Checkpoint) -> azure_core::Result<()> {
        self.store.update_checkpoint(checkpoint).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(partition: &str, seq: Option<i64>) -> Checkpoint {
        Checkpoint {
            partition_id: partition.into(),
            sequence_number: seq,
            ..Checkpoint::default()
        }
    }

    #[test]
    fn a_partition_checkpointed_at_its_last_event_has_nothing_to_hand_over() {
        assert!(!unfinished(Some(41), Some(41)));
        assert!(!unfinished(Some(-1), None), "empty");
        assert!(unfinished(Some(42), Some(41)));
        assert!(unfinished(Some(0), None));
        assert!(unfinished(None, Some(41)), "not polled yet");
    }

    #[test]
    fn a_moved_partition_waits_for_its_checkpoint_to_change() {
        let moved: HashSet<String> = ["1".to_owned(), "2".to_owned()].into();
        let before = HashMap::from([("1".to_owned(), Some(10)), ("2".to_owned(), None)]);
        let unchanged = [checkpoint("1", Some(10)), checkpoint("3", Some(5))];
        assert!(!all_moved(&moved, &before, &unchanged));
        let one = [checkpoint("1", Some(14))];
        assert!(
            !all_moved(&moved, &before, &one),
            "partition 2 has none yet"
        );
        let both = [checkpoint("1", Some(14)), checkpoint("2", Some(0))];
        assert!(all_moved(&moved, &before, &both));
    }
}

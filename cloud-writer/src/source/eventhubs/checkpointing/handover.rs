//! Taking a partition from a replica that still reads it without reading again what that
//! replica finished: the checkpoint store as the SDK's processor sees it ([`Handovers`]),
//! which also spreads the partitions the processor steals ([`super::balance`]).
//!
//! The processor claims a partition from another current owner when balancing moves it
//! (a replica started, or one above its share), then lists the checkpoints and opens the
//! partition from its checkpoint at once. The previous owner reads on until it sees the
//! takeover (its watch lists the ownerships every second or more often:
//! [`super::takeover`]); everything
//! it took after the checkpoint the new owner started from would be read twice (up to a
//! checkpoint interval's events, written to Cosmos DB twice: 2.5 to 12.5 % of the stream
//! in rolling restarts and scaling on 32 partitions). So the previous owner, once it sees
//! the takeover, lets its events in flight reach their outcome, writes its last
//! checkpoint, and records the handover for the new owner's claim (its ETag: a
//! `handover` document or blob, [`Store::hand_over`](super::store::Store::hand_over)); and after a claim that took a
//! partition from another current owner, the checkpoint listing the processor opens it
//! with waits for that record, at most [`WAIT`]. A checkpoint that merely moved proves
//! nothing: the previous owner writes one every checkpoint interval while it reads on.
//!
//! Its cost: per moved partition one more write by the previous owner (a Cosmos upsert of
//! about 6 RU, or a blob PUT); the processor's balancing round, and so the moved
//! partitions, wait until it is in (up to a second: the previous owner's watch), and the
//! handovers and the ownerships are listed every [`POLL`] meanwhile (two queries of about
//! 3 RU, or two blob listings). A previous owner that is gone (ended without giving its partitions up) is
//! waited for the whole [`WAIT`].

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

#[cfg(test)]
use azure_core::http::Etag;
use azure_core::time::OffsetDateTime;
use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::{Checkpoint, Ownership};

use super::balance::even_steals;
use super::store::{Scope, SharedStore, unquoted};
use super::takeover::Takeovers;

/// Longest wait for a moved partition's handover: the previous owner's ownership listing
/// (every second at most), its events in flight reaching their outcome (a batch's write, up to
/// `partitions::SETTLE`) and its two writes. Longer, it holds the processor's round past
/// the balancing interval, while the other replicas, balancing, take partitions claimed
/// here and not yet read.
const WAIT: Duration = Duration::from_millis(2000);
/// How often the handovers and ownerships are listed meanwhile.
const POLL: Duration = Duration::from_millis(100);

/// The checkpoint store as this replica's processor uses it, and which partitions it last
/// claimed from another current owner.
#[derive(Debug)]
pub(in crate::source::eventhubs) struct Handovers {
    store: SharedStore,
    owner: String,
    expiry: Duration,
    /// The hub's partition count.
    partitions: usize,
    /// Learns of partitions claimed here and by another replica before they opened.
    takeovers: Takeovers,
    /// The longest wait for a handover: [`WAIT`].
    wait: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The current ownerships, by the last listing.
    listed: Vec<Ownership>,
    /// The partitions another current owner holds, by the last listing.
    others: HashSet<String>,
    /// Partitions claimed from another current owner since the checkpoints were listed,
    /// with the claim's ETag (unquoted).
    moved: HashMap<String, String>,
    /// Every partition claimed since the checkpoints were listed.
    claimed: HashSet<String>,
}

impl Handovers {
    /// `store` as this replica's processor (`owner`) uses it, ownerships holding `expiry`
    /// on a hub of `partitions` partitions, telling `takeovers` of the partitions claimed
    /// here that another replica claimed before they opened.
    pub(in crate::source::eventhubs) fn new(
        store: SharedStore,
        owner: String,
        expiry: Duration,
        partitions: usize,
        takeovers: Takeovers,
    ) -> Handovers {
        Handovers {
            store,
            owner,
            expiry,
            partitions,
            takeovers,
            wait: WAIT,
            state: Mutex::new(State::default()),
        }
    }

    /// Waits up to `wait` for a handover: a test's previous owner may be slowed by a busy
    /// machine past [`WAIT`].
    #[cfg(test)]
    fn set_wait(&mut self, wait: Duration) {
        self.wait = wait;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until every one of `moved` (partition, claim) is handed over for its claim,
    /// or is no longer this replica's, at most [`WAIT`] (`wait`). A partition of `claimed` that
    /// another replica claimed meanwhile, and that is not read here yet, is not read here
    /// at all (the processor opens it all the same: [`Takeovers::forsake`]); if no other
    /// replica reads it either, it is handed over to that replica's claim at once.
    async fn handed_over(
        &self,
        scope: &Scope,
        moved: &HashMap<String, String>,
        mut claimed: HashSet<String>,
    ) {
        let deadline = tokio::time::Instant::now() + self.wait;
        let mut pending = moved.clone();
        loop {
            let listed = tokio::try_join!(
                self.store.handed_over(scope),
                self.store.list_ownerships(
                    &scope.namespace,
                    &scope.event_hub,
                    &scope.consumer_group
                )
            );
            match listed {
                Ok((handed, ownerships)) => {
                    for ownership in &ownerships {
                        let partition = &ownership.partition_id;
                        let taken = ownership.owner_id.as_deref() != Some(self.owner.as_str());
                        if !taken || !claimed.remove(partition) || self.takeovers.reads(partition) {
                            continue;
                        }
                        self.takeovers.forsake(partition);
                        pending.remove(partition);
                        // Handed over only where no replica reads it: claimed here unowned,
                        // or handed over here by the replica that read it. A replica still
                        // reading it hands it over itself, to the claim it sees.
                        let unread = match moved.get(partition) {
                            None => true,
                            Some(claim) => handed.get(partition) == Some(claim),
                        };
                        if unread
                            && let Some(etag) = &ownership.etag
                            && let Err(err) =
                                self.store.hand_over(scope, partition, etag.as_ref()).await
                        {
                            tracing::debug!(%partition, error = %err, "handover not recorded: the new owner opens the partition after its wait");
                        }
                    }
                    pending.retain(|p, claim| handed.get(p) != Some(claim));
                    if pending.is_empty() {
                        tracing::debug!(partitions = ?moved.keys(), "moved partitions handed over by their previous owners");
                        return;
                    }
                }
                // A listing that fails ends the wait, not the processor's round.
                Err(err) => {
                    tracing::debug!(error = %err, "handovers not listed: the moved partitions open at their checkpoints");
                    return;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::info!(partitions = ?pending.keys(), waited = ?self.wait, "moved partitions not handed over by their previous owner: what it had not finished is read again");
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[async_trait::async_trait]
impl CheckpointStore for Handovers {
    async fn claim_ownership(
        &self,
        ownerships: &[Ownership],
    ) -> azure_core::Result<Vec<Ownership>> {
        let claim = {
            let state = self.state();
            even_steals(
                ownerships.to_vec(),
                &state.listed,
                &self.owner,
                self.partitions,
            )
        };
        let claimed = self.store.claim_ownership(&claim).await?;
        let mut state = self.state();
        for ownership in &claimed {
            state.claimed.insert(ownership.partition_id.clone());
            if let Some(etag) = &ownership.etag
                && state.others.contains(&ownership.partition_id)
            {
                let etag = unquoted(etag.as_ref()).to_owned();
                state.moved.insert(ownership.partition_id.clone(), etag);
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
        let (moved, claimed) = {
            let mut state = self.state();
            (
                std::mem::take(&mut state.moved),
                std::mem::take(&mut state.claimed),
            )
        };
        self.takeovers.claimed_again(&claimed);
        if !moved.is_empty() {
            let scope = Scope::new(namespace, event_hub_name, consumer_group);
            self.handed_over(&scope, &moved, claimed).await;
        }
        self.store
            .list_checkpoints(namespace, event_hub_name, consumer_group)
            .await
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
        let listed: Vec<Ownership> = ownerships
            .iter()
            .filter(|o| {
                o.owner_id.as_deref().is_some_and(|owner| !owner.is_empty())
                    && o.last_modified_time
                        .is_some_and(|at| now - at < self.expiry)
            })
            .cloned()
            .collect();
        let others = listed
            .iter()
            .filter(|o| o.owner_id.as_deref() != Some(self.owner.as_str()))
            .map(|o| o.partition_id.clone())
            .collect();
        let mut state = self.state();
        state.others = others;
        state.listed = listed;
        drop(state);
        Ok(ownerships)
    }

    async fn update_checkpoint(&self, checkpoint: Checkpoint) -> azure_core::Result<()> {
        self.store.update_checkpoint(checkpoint).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::source::eventhubs::checkpointing::cosmos_store::CosmosCheckpointStore;

    /// A Cosmos checkpoint store on a local endpoint where replica `previous` holds
    /// partitions 0 and 1, and the processor of replica `next` on a hub of `partitions`
    /// partitions, having listed the ownerships, sees the store through [`Handovers`].
    struct Fixture {
        sim: cosmos_sim::CosmosSim,
        store: SharedStore,
        scope: Scope,
        /// The previous owner's ownerships of partitions 0 and 1.
        previous: Vec<Ownership>,
        takeovers: Takeovers,
        handovers: Handovers,
    }

    impl Fixture {
        async fn new(partitions: usize) -> Fixture {
            let (sim, store) = CosmosCheckpointStore::on_local_endpoint().await;
            let store: SharedStore = Arc::new(store);
            let scope = Scope::new("hub.servicebus.windows.net", "hub", "$Default");
            let takeovers = Takeovers::default();
            let handovers = Handovers::new(
                store.clone(),
                "next".into(),
                Duration::from_secs(10),
                partitions,
                takeovers.clone(),
            );
            let mut fixture = Fixture {
                sim,
                store,
                scope,
                previous: Vec::new(),
                takeovers,
                handovers,
            };
            let held = [
                fixture.ownership("0", "previous", None),
                fixture.ownership("1", "previous", None),
            ];
            fixture.previous = fixture.store.claim_ownership(&held).await.unwrap();
            let scope = &fixture.scope;
            fixture
                .handovers
                .list_ownerships(&scope.namespace, &scope.event_hub, &scope.consumer_group)
                .await
                .unwrap();
            fixture
        }

        fn ownership(&self, partition: &str, owner: &str, etag: Option<Etag>) -> Ownership {
            Ownership {
                owner_id: Some(owner.into()),
                etag,
                ..self.scope.ownership(partition.into(), None, None, None)
            }
        }

        /// The checkpoints, as the processor lists them before it opens the partitions.
        async fn list_checkpoints(&self) -> Vec<Checkpoint> {
            let scope = &self.scope;
            self.handovers
                .list_checkpoints(&scope.namespace, &scope.event_hub, &scope.consumer_group)
                .await
                .unwrap()
        }
    }

    /// A partition claimed from a replica that still reads it opens at the checkpoint
    /// that replica wrote before it handed the partition over for this claim, not at the
    /// one it wrote before: the listing waits for the handover. The previous owner hands
    /// over once the listing has asked for handovers several times, however slow the
    /// machine, and the listing waits long enough for it.
    #[tokio::test]
    async fn a_moved_partition_opens_at_its_previous_owners_last_checkpoint() {
        let mut f = Fixture::new(2).await;
        f.handovers.set_wait(Duration::from_secs(120));
        for partition in ["0", "1"] {
            let checkpoint = f.scope.checkpoint(partition, Some(10), None);
            f.store.update_checkpoint(checkpoint).await.unwrap();
        }
        let claimed = f
            .handovers
            .claim_ownership(&[f.ownership("0", "next", f.previous[0].etag.clone())])
            .await
            .unwrap();
        let [claimed] = claimed.as_slice() else {
            panic!("one partition claimed: {claimed:?}");
        };
        let (partition, claim) = (
            &claimed.partition_id,
            claimed.etag.clone().unwrap().to_string(),
        );
        // The previous owner, reading on, writes a checkpoint (not a handover), then sees
        // the takeover, writes its last one and hands over.
        let checkpoint = |seq| f.scope.checkpoint(partition, Some(seq), None);
        f.store.update_checkpoint(checkpoint(20)).await.unwrap();
        let before = f.sim.stats().requests;
        let previous_owner = async {
            test_harness::eventually(
                "the listing to ask for handovers",
                Duration::from_secs(60),
                async || f.sim.stats().requests,
                |&requests| requests >= before + 5,
            )
            .await;
            f.store.update_checkpoint(checkpoint(42)).await.unwrap();
            f.store
                .hand_over(&f.scope, partition, &claim)
                .await
                .unwrap();
        };
        let (listed, ()) = tokio::join!(f.list_checkpoints(), previous_owner);
        let of = |listed: Vec<Checkpoint>| {
            listed
                .into_iter()
                .find(|c| &c.partition_id == partition)
                .and_then(|c| c.sequence_number)
        };
        assert_eq!(of(listed), Some(42));
        // Nothing moved since: the next listing does not wait.
        assert_eq!(of(f.list_checkpoints().await), Some(42));
    }

    /// Partitions claimed here and, while this replica waits for a handover, by another
    /// replica before they were read here: they are not read here; the one claimed here
    /// unowned is handed over to the other claim at once (nobody read it), the one claimed
    /// from a replica still reading it is not (that replica hands it over itself).
    #[tokio::test]
    async fn partitions_claimed_away_before_they_opened_are_not_read_here() {
        let f = Fixture::new(3).await;
        let claimed = f
            .handovers
            .claim_ownership(&[
                f.ownership("0", "next", f.previous[0].etag.clone()),
                f.ownership("2", "next", None),
            ])
            .await
            .unwrap();
        assert_eq!(claimed.len(), 2, "{claimed:?}");
        // A third replica claims both from this one before the previous owner saw the
        // first claim.
        let third: Vec<Ownership> = claimed
            .iter()
            .map(|o| f.ownership(&o.partition_id, "third", o.etag.clone()))
            .collect();
        let third = f.store.claim_ownership(&third).await.unwrap();
        f.list_checkpoints().await;
        let handed = f.store.handed_over(&f.scope).await.unwrap();
        let free = third.iter().find(|o| o.partition_id == "2").unwrap();
        let moved = third.iter().find(|o| o.partition_id != "2").unwrap();
        let free_claim = free.etag.as_ref().unwrap();
        assert_eq!(
            handed.get("2").map(String::as_str),
            Some(unquoted(free_claim.as_ref()))
        );
        assert_eq!(handed.get(&moved.partition_id), None, "{handed:?}");
        assert!(f.takeovers.forsaken("2"), "not read here");
        assert!(f.takeovers.forsaken(&moved.partition_id), "not read here");
    }
}

//! Ending the readings of partitions another replica has taken over, from the checkpoint
//! store's ownerships; and, from the same listing, whether this replica has its share of
//! the work (the readiness of an Event Hubs replica: it reads a partition, or every
//! partition has another current owner, as when there are more replicas than partitions).
//!
//! The hub displaces a receiver when another attaches to its partition with an equal or
//! higher owner level (`amqp:link:stolen`), and the SDK's processor asks a revoked
//! partition's receiver to close; but a receiver whose receive was in flight when the
//! processor revoked it cannot be detached by the SDK, and its stream may wait on: the
//! reading went on, the partition counted as owned here and read by the new owner too
//! (seen with 8 replicas on 32 partitions: 36 partitions owned in all, for minutes). Every
//! second (four times a balancing interval, if that is more often) the watch lists the
//! ownerships and ends the reading of each partition this replica reads that another owner
//! holds, within its expiry, telling it the new owner's claim (its ETag), for which the
//! reading hands the partition over (`super::handover`). Its cost: with the default
//! interval, one listing a second per replica, a query of the Cosmos container (about 3 RU
//! for 32 ownerships, so 3 RU/s per replica) or a blob listing (no RU, a list operation);
//! with a 2 s interval, twice that.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use azure_core::time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::store::{Scope, SharedStore};
use crate::metrics::Metrics;

/// The running readings' tokens, by partition: cancelled when the partition was taken over.
#[derive(Debug, Clone, Default)]
pub(in crate::source::eventhubs) struct Takeovers {
    readings: Arc<Mutex<HashMap<String, Reading>>>,
    next: Arc<AtomicU64>,
    /// Partitions the processor claimed here that another replica claimed before their
    /// reading began (`super::handover`): the processor opens them all the same.
    forsaken: Arc<Mutex<HashSet<String>>>,
}

/// One reading's place in [`Takeovers`]: cancelled when its partition was taken over.
#[derive(Debug, Clone)]
pub(in crate::source::eventhubs) struct Reading {
    id: u64,
    /// Cancelled on a takeover.
    pub(in crate::source::eventhubs) taken_over: CancellationToken,
    /// The ETag of the new owner's claim, once taken over.
    claim: Arc<OnceLock<String>>,
}

impl Reading {
    /// The ETag of the claim that took the partition over, if it was.
    pub(in crate::source::eventhubs) fn claim(&self) -> Option<&str> {
        self.claim.get().map(String::as_str)
    }
}

impl Takeovers {
    /// A reading of `partition` that starts now.
    pub(in crate::source::eventhubs) fn reading(&self, partition: &str) -> Reading {
        let reading = Reading {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            taken_over: CancellationToken::new(),
            claim: Arc::default(),
        };
        self.lock().insert(partition.to_owned(), reading.clone());
        reading
    }

    /// `reading` of `partition` ended (a later reading of it stays).
    pub(in crate::source::eventhubs) fn ended(&self, partition: &str, reading: &Reading) {
        let mut readings = self.lock();
        if readings
            .get(partition)
            .is_some_and(|current| current.id == reading.id)
        {
            readings.remove(partition);
        }
    }

    /// Where the readings started from now on begin: a listing sent before a reading
    /// began may predate this replica's claim, so it ends only the readings before it.
    fn mark(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Ends the reading of `partition` if one runs that began before `mark`, for the claim
    /// with ETag `claim`; true if it did.
    fn take_over(&self, partition: &str, mark: u64, claim: Option<String>) -> bool {
        let mut readings = self.lock();
        if readings.get(partition).is_none_or(|r| r.id >= mark) {
            return false;
        }
        let reading = readings
            .remove(partition)
            .expect("looked up under the same lock");
        if let Some(claim) = claim {
            let _ = reading.claim.set(claim);
        }
        reading.taken_over.cancel();
        true
    }

    /// `partition`, claimed here, was claimed by another replica before its reading
    /// began: the reading the processor opens for it ends at once.
    pub(in crate::source::eventhubs) fn forsake(&self, partition: &str) {
        lock(&self.forsaken).insert(partition.to_owned());
    }

    /// Whether `partition` was forsaken since it was last opened; its next opening is not.
    pub(in crate::source::eventhubs) fn forsaken(&self, partition: &str) -> bool {
        lock(&self.forsaken).remove(partition)
    }

    /// `partitions` are claimed here again: a mark left from an earlier claim whose
    /// reading the processor never opened no longer holds.
    pub(in crate::source::eventhubs) fn claimed_again(&self, partitions: &HashSet<String>) {
        lock(&self.forsaken).retain(|p| !partitions.contains(p));
    }

    /// Whether a reading of `partition` runs.
    pub(in crate::source::eventhubs) fn reads(&self, partition: &str) -> bool {
        self.lock().contains_key(partition)
    }

    fn read(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Reading>> {
        lock(&self.readings)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// How often the ownerships are listed at least (with the default 10 s balancing interval,
/// this often).
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Listings per balancing interval at least: a new owner waits for the handover up to a
/// listing period, so a short interval gets a short period (2 s: every 500 ms).
const WATCHES_PER_INTERVAL: u32 = 4;

/// What the watch needs.
pub(in crate::source::eventhubs) struct Watch {
    pub(in crate::source::eventhubs) store: SharedStore,
    pub(in crate::source::eventhubs) scope: Scope,
    /// This replica's owner id.
    pub(in crate::source::eventhubs) owner: String,
    /// The balancing interval.
    pub(in crate::source::eventhubs) interval: Duration,
    /// How long an ownership holds without renewal.
    pub(in crate::source::eventhubs) expiry: Duration,
    /// The hub's partitions.
    pub(in crate::source::eventhubs) partitions: Vec<String>,
    pub(in crate::source::eventhubs) metrics: Arc<Metrics>,
}

impl Watch {
    /// Lists the ownerships every interval until `reading` is cancelled, ending the
    /// readings of partitions another owner holds.
    pub(in crate::source::eventhubs) async fn run(
        self,
        takeovers: Takeovers,
        reading: CancellationToken,
    ) {
        let period = (self.interval / WATCHES_PER_INTERVAL).min(WATCH_EVERY);
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = reading.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let mark = takeovers.mark();
            let listed = self
                .store
                .list_ownerships(
                    &self.scope.namespace,
                    &self.scope.event_hub,
                    &self.scope.consumer_group,
                )
                .await;
            let ownerships = match listed {
                Ok(ownerships) => ownerships,
                Err(err) => {
                    tracing::debug!(error = %err, "ownerships not listed: takeovers are seen at the next interval");
                    continue;
                }
            };
            let now = OffsetDateTime::now_utc();
            let mut owned_by_others = Vec::new();
            for ownership in ownerships {
                let Some(owner) = ownership.owner_id.as_deref() else {
                    continue;
                };
                let current = ownership
                    .last_modified_time
                    .is_some_and(|at| now - at < self.expiry);
                if owner == self.owner || owner.is_empty() || !current {
                    continue;
                }
                let claim = ownership.etag.as_ref().map(ToString::to_string);
                if takeovers.take_over(&ownership.partition_id, mark, claim) {
                    tracing::info!(partition = %ownership.partition_id, %owner, "partition taken over by another replica: its reading here ends");
                }
                owned_by_others.push(ownership.partition_id);
            }
            let reads_some = !takeovers.read().is_empty();
            let none_free = self.partitions.iter().all(|p| owned_by_others.contains(p));
            self.metrics.set_source_assigned(reads_some || none_free);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_taken_over_is_cancelled_once_and_forgotten() {
        let takeovers = Takeovers::default();
        let first = takeovers.reading("3");
        assert_eq!(takeovers.read(), vec!["3".to_owned()]);
        let mark = takeovers.mark();
        assert!(takeovers.take_over("3", mark, Some("\"e1\"".into())));
        assert!(first.taken_over.is_cancelled());
        assert_eq!(first.claim(), Some("\"e1\""));
        assert!(!takeovers.take_over("3", mark, None), "nothing left to end");
        // A later reading of the partition is a new one; the earlier one ending does not
        // forget it.
        let second = takeovers.reading("3");
        takeovers.ended("3", &first);
        assert_eq!(takeovers.read(), vec!["3".to_owned()]);
        takeovers.ended("3", &second);
        assert!(takeovers.read().is_empty());
        assert!(!second.taken_over.is_cancelled());
    }

    #[test]
    fn a_listing_sent_before_a_reading_began_does_not_end_it() {
        let takeovers = Takeovers::default();
        let before = takeovers.reading("3");
        // The listing is sent here; it may show the partition's previous owner, as this
        // replica's claim may land after it.
        let mark = takeovers.mark();
        takeovers.ended("3", &before);
        let after = takeovers.reading("3");
        assert!(!takeovers.take_over("3", mark, None));
        assert!(!after.taken_over.is_cancelled());
        assert!(takeovers.take_over("3", takeovers.mark(), None));
        assert!(after.taken_over.is_cancelled());
    }

    #[test]
    fn a_forsaken_partition_is_skipped_at_its_next_opening_only() {
        let takeovers = Takeovers::default();
        takeovers.forsake("5");
        assert!(!takeovers.forsaken("4"));
        assert!(takeovers.forsaken("5"));
        assert!(!takeovers.forsaken("5"), "opened again later, it is read");
        // A mark whose reading never opened does not outlive the partition's next claim.
        takeovers.forsake("6");
        takeovers.claimed_again(&HashSet::from(["6".to_owned()]));
        assert!(!takeovers.forsaken("6"));
    }
}

//! The stall watchdog of the partition readers. A partition read here is stalled when its
//! reader has waited for the next event, without one arriving, since before the hub last
//! said it holds events newer than any the reader has seen, and that was at least
//! [`stall_after`] ago. A reader held back by the pipeline (a full queue, Cosmos DB
//! refusing) or writing its checkpoint is not waiting for an event and is never stalled.
//!
//! The readers record their progress ([`Progress`]); the lag monitor, which asks the hub
//! for every partition's last enqueued sequence number every balancing interval, compares
//! ([`Watchdog`]) and, on a stall, ends the session, so that the source opens a new
//! connection and reads on from the checkpoints. A stall delivers nothing, so nothing is
//! read again; it costs the new connection and one balancing round.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long events the hub holds may go undelivered to a waiting reader: three balancing
/// intervals (the lag is polled once per interval), and no less than 15 s, so that a busy
/// machine's slow delivery is not taken for a stall.
pub(super) fn stall_after(interval: Duration) -> Duration {
    (interval * 3).max(Duration::from_secs(15))
}

/// Where one reading of a partition is: since when it waits for its next event, and the
/// last sequence number its receiver delivered. Written by the reader on every event.
#[derive(Debug)]
pub(super) struct Progress {
    base: Instant,
    /// Nanoseconds after `base` plus one since the reader waits; 0 while it handles an
    /// event.
    waiting: AtomicU64,
    /// Whether the reader is writing its checkpoint (it does not take events meanwhile).
    checkpointing: AtomicBool,
    /// The last sequence number delivered; `i64::MIN` before the first.
    last: AtomicI64,
}

impl Default for Progress {
    fn default() -> Progress {
        Progress {
            base: Instant::now(),
            waiting: AtomicU64::new(0),
            checkpointing: AtomicBool::new(false),
            last: AtomicI64::new(i64::MIN),
        }
    }
}

impl Progress {
    /// The reader waits for its next event (again, if it handled one since).
    pub(super) fn ready(&self) {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            let since = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
            self.waiting.store(since + 1, Ordering::Relaxed);
        }
    }

    /// An event arrived, with its sequence number if it has one.
    pub(super) fn arrived(&self, sequence: Option<i64>) {
        self.waiting.store(0, Ordering::Relaxed);
        if let Some(sequence) = sequence {
            self.last.store(sequence, Ordering::Relaxed);
        }
    }

    /// The reader writes its checkpoint (`true`), or is done with it (`false`).
    pub(super) fn checkpointing(&self, now: bool) {
        self.checkpointing.store(now, Ordering::Relaxed);
    }

    fn state(&self) -> State {
        let waiting = self.waiting.load(Ordering::Relaxed);
        let last = self.last.load(Ordering::Relaxed);
        let checkpointing = self.checkpointing.load(Ordering::Relaxed);
        State {
            waiting_since: (waiting > 0 && !checkpointing)
                .then(|| self.base + Duration::from_nanos(waiting - 1)),
            last: (last != i64::MIN).then_some(last),
        }
    }
}

/// A reading's progress at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    waiting_since: Option<Instant>,
    last: Option<i64>,
}

/// The progress of every partition read here, shared by the readers and the monitor.
#[derive(Debug, Clone, Default)]
pub(super) struct Readings(Arc<Mutex<HashMap<String, Arc<Progress>>>>);

impl Readings {
    /// A reading of `partition` begins: its progress, watched until [`Readings::ended`].
    pub(super) fn begin(&self, partition: &str) -> Arc<Progress> {
        let progress = Arc::new(Progress::default());
        self.lock().insert(partition.to_owned(), progress.clone());
        progress
    }

    /// The reading with `progress` ended (a newer reading of the partition stays watched).
    pub(super) fn ended(&self, partition: &str, progress: &Arc<Progress>) {
        let mut readings = self.lock();
        if readings
            .get(partition)
            .is_some_and(|p| Arc::ptr_eq(p, progress))
        {
            readings.remove(partition);
        }
    }

    /// Every reading's progress now: taken before a poll of the hub, so that what the hub
    /// then says is at least as new as what each reader had seen.
    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot(
            self.lock()
                .iter()
                .map(|(partition, progress)| {
                    (partition.clone(), (progress.clone(), progress.state()))
                })
                .collect(),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Progress>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The readings' progress taken before a poll.
pub(super) struct Snapshot(HashMap<String, (Arc<Progress>, State)>);

/// A stalled partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stall {
    pub(super) partition: String,
    /// The last sequence number the hub holds.
    pub(super) held: i64,
    /// The last one the reader was delivered, if any.
    pub(super) delivered: Option<i64>,
    /// How long the events have been held from the waiting reader.
    pub(super) undelivered_for: Duration,
}

/// A wait that may become a stall.
#[derive(Debug)]
struct Suspect {
    waiting_since: Instant,
    /// The sequence number the reader has: its last delivered, or, before its first
    /// event, what the hub held when the wait was first seen.
    has: i64,
    /// When the hub was first seen holding newer events than `has`.
    behind_since: Option<Instant>,
}

/// The monitor's side: compares the readings' progress with the hub's last enqueued
/// sequence numbers, poll after poll.
#[derive(Debug)]
pub(super) struct Watchdog {
    stall_after: Duration,
    suspects: HashMap<String, Suspect>,
}

impl Watchdog {
    pub(super) fn new(stall_after: Duration) -> Watchdog {
        Watchdog {
            stall_after,
            suspects: HashMap::new(),
        }
    }

    /// After a poll that began with `before` and answered at `now` with every
    /// partition's last enqueued sequence number (`None`: the partition is empty): the
    /// partitions stalled.
    pub(super) fn observe(
        &mut self,
        before: Snapshot,
        held: &HashMap<String, Option<i64>>,
        now: Instant,
    ) -> Vec<Stall> {
        let mut stalls = Vec::new();
        let mut waiting = HashMap::new();
        for (partition, (progress, state)) in before.0 {
            // Still waiting since before the poll, with nothing delivered meanwhile.
            let Some(since) = state.waiting_since else {
                continue;
            };
            if progress.state() != state {
                continue;
            }
            let held = held.get(&partition).copied().flatten().unwrap_or(-1);
            let suspect = match self.suspects.remove(&partition) {
                Some(suspect) if suspect.waiting_since == since => suspect,
                _ => Suspect {
                    waiting_since: since,
                    has: state.last.unwrap_or(held),
                    behind_since: None,
                },
            };
            let mut suspect = suspect;
            if held > suspect.has {
                let behind_since = *suspect.behind_since.get_or_insert(now);
                let undelivered_for = now.saturating_duration_since(behind_since);
                if undelivered_for >= self.stall_after {
                    stalls.push(Stall {
                        partition: partition.clone(),
                        held,
                        delivered: state.last,
                        undelivered_for,
                    });
                }
            }
            waiting.insert(partition, suspect);
        }
        self.suspects = waiting;
        stalls.sort_by(|a, b| a.partition.cmp(&b.partition));
        stalls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(15);

    /// What the watchdog finds in a poll answered `at` with `held`, the readings' progress
    /// taken just before.
    fn poll(
        watchdog: &mut Watchdog,
        readings: &Readings,
        held: &HashMap<String, Option<i64>>,
        at: Instant,
    ) -> Vec<Stall> {
        watchdog.observe(readings.snapshot(), held, at)
    }

    fn held(pairs: &[(&str, Option<i64>)]) -> HashMap<String, Option<i64>> {
        pairs.iter().map(|(p, s)| ((*p).to_owned(), *s)).collect()
    }

    #[test]
    fn the_stall_bound_is_three_intervals_and_at_least_15_s() {
        assert_eq!(
            stall_after(Duration::from_secs(10)),
            Duration::from_secs(30)
        );
        assert_eq!(stall_after(Duration::from_secs(2)), Duration::from_secs(15));
    }

    #[test]
    fn a_reader_waiting_while_the_hub_holds_newer_events_is_stalled_after_the_bound() {
        let readings = Readings::default();
        let progress = readings.begin("3");
        progress.ready();
        progress.arrived(Some(41));
        progress.ready();
        let mut watchdog = Watchdog::new(AFTER);
        let t0 = Instant::now();
        // The hub holds 42 and 43: behind from the first poll on.
        let behind = held(&[("3", Some(43))]);
        assert!(poll(&mut watchdog, &readings, &behind, t0).is_empty());
        assert!(poll(&mut watchdog, &readings, &behind, t0 + AFTER / 2).is_empty());
        let stalls = poll(&mut watchdog, &readings, &behind, t0 + AFTER);
        assert_eq!(
            stalls,
            [Stall {
                partition: "3".into(),
                held: 43,
                delivered: Some(41),
                undelivered_for: AFTER,
            }]
        );
    }

    #[test]
    fn an_event_arriving_restarts_the_wait() {
        let readings = Readings::default();
        let progress = readings.begin("3");
        progress.ready();
        let mut watchdog = Watchdog::new(AFTER);
        let t0 = Instant::now();
        // Before its first event: the hub's 9 is the baseline; 12 later is behind.
        assert!(poll(&mut watchdog, &readings, &held(&[("3", Some(9))]), t0).is_empty());
        let behind = held(&[("3", Some(12))]);
        assert!(
            poll(
                &mut watchdog,
                &readings,
                &behind,
                t0 + Duration::from_secs(1)
            )
            .is_empty()
        );
        progress.arrived(Some(12));
        progress.ready();
        assert!(poll(&mut watchdog, &readings, &behind, t0 + AFTER * 2).is_empty());
        // Delivered up to what the hub holds: never stalled.
        assert!(poll(&mut watchdog, &readings, &behind, t0 + AFTER * 4).is_empty());
    }

    #[test]
    fn a_reader_held_back_by_the_pipeline_or_delivered_meanwhile_is_not_stalled() {
        let readings = Readings::default();
        let progress = readings.begin("5");
        progress.ready();
        progress.arrived(Some(1));
        // Handling event 1 (the pipeline is full): not waiting.
        let mut watchdog = Watchdog::new(AFTER);
        let t0 = Instant::now();
        let behind = held(&[("5", Some(100))]);
        for i in 0..5 {
            assert!(poll(&mut watchdog, &readings, &behind, t0 + AFTER * i).is_empty());
        }
        // Waiting, but an event arrives during each poll.
        progress.ready();
        for i in 5..10u32 {
            let before = readings.snapshot();
            progress.arrived(Some(i64::from(i)));
            progress.ready();
            assert!(watchdog.observe(before, &behind, t0 + AFTER * i).is_empty());
        }
        // Nor while it writes its checkpoint: the wait is watched again from then on.
        progress.ready();
        let t1 = t0 + AFTER * 10;
        assert!(poll(&mut watchdog, &readings, &behind, t1).is_empty());
        progress.checkpointing(true);
        assert!(poll(&mut watchdog, &readings, &behind, t1 + AFTER).is_empty());
        progress.checkpointing(false);
        assert!(poll(&mut watchdog, &readings, &behind, t1 + AFTER * 2).is_empty());
        assert_eq!(
            poll(&mut watchdog, &readings, &behind, t1 + AFTER * 3).len(),
            1
        );
        // An empty partition, and a partition no longer read, are not stalled.
        let empty = readings.begin("6");
        empty.ready();
        for i in 40..43 {
            let polled = held(&[("5", Some(9)), ("6", None)]);
            assert!(poll(&mut watchdog, &readings, &polled, t0 + AFTER * i).is_empty());
        }
        readings.ended("5", &progress);
        readings.ended("6", &empty);
        assert!(readings.snapshot().0.is_empty());
    }

    #[test]
    fn a_newer_reading_of_the_partition_stays_watched_when_the_older_ends() {
        let readings = Readings::default();
        let older = readings.begin("2");
        let newer = readings.begin("2");
        readings.ended("2", &older);
        let snapshot = readings.snapshot();
        assert!(Arc::ptr_eq(&snapshot.0["2"].0, &newer));
    }
}

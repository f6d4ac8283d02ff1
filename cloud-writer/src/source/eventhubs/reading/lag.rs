//! The checkpoint lag of every partition of the hub, in events: the partition's last
//! enqueued sequence number (the hub's `$management` answer) minus this consumer group's
//! checkpoint (the checkpoint store), for every partition, owned by this replica or not.
//! Every replica reports it for every partition, so an autoscaler takes `max by
//! (partition)` and sums over partitions. Polled every load-balancing interval by a
//! session's [`Monitor`], which also tells whether the hub answers (`source_connected`) and
//! watches for stalled receivers ([`super::stall`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use azure_messaging_eventhubs::ConsumerClient;
use azure_messaging_eventhubs::models::EventHubPartitionProperties;
use tokio_util::sync::CancellationToken;

use super::failure::SessionHealth;
use super::stall::{self, Readings, Watchdog};
use crate::metrics::Metrics;
use crate::source::eventhubs::checkpointing::checkpoints::PartitionCheckpoints;

/// Events of a partition after the checkpoint: the last enqueued sequence number minus the
/// checkpoint's (which names the last event already final), counting only events the hub
/// still retains; without a checkpoint, every retained event. An empty partition has none.
pub fn lag_events(partition: &EventHubPartitionProperties, checkpoint: Option<i64>) -> i64 {
    if partition.is_empty {
        return 0;
    }
    let before_first = partition.beginning_sequence_number - 1;
    let done = checkpoint.map_or(before_first, |c| c.max(before_first));
    (partition.last_enqueued_sequence_number - done).max(0)
}

/// Why a poll could not report every partition.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// The hub did not answer a partition's properties: it is out of reach.
    #[error("the hub does not answer (partition {partition} properties): {cause}")]
    Hub {
        /// The partition asked about.
        partition: String,
        /// The SDK's error.
        cause: String,
    },
    /// The checkpoint store did not list the checkpoints.
    #[error("the checkpoint store does not list the checkpoints: {0}")]
    Store(String),
}

/// Reads every partition's properties and the checkpoints, sets `eventhubs_lag_events` of
/// each partition, and returns each partition's last enqueued sequence number (`None`:
/// the partition is empty).
async fn poll(
    hub: &ConsumerClient,
    partitions: &[String],
    checkpoints: &PartitionCheckpoints,
    metrics: &Metrics,
) -> Result<HashMap<String, Option<i64>>, PollError> {
    // Asked together, answered one at a time: the SDK holds a lock around each call on its
    // `$management` link, so 32 partitions are 32 round trips (over 2 s beside 8 replicas
    // on 2 cores; [`answer_within`] allows for that).
    let last = futures::future::try_join_all(partitions.iter().map(|partition| async move {
        hub.get_partition_properties(partition)
            .await
            .map_err(|e| PollError::Hub {
                partition: partition.clone(),
                cause: e.to_string(),
            })
    }))
    .await?;
    let stored = checkpoints
        .stored()
        .await
        .map_err(|e| PollError::Store(e.to_string()))?;
    let mut held = HashMap::with_capacity(partitions.len());
    for (partition, properties) in partitions.iter().zip(&last) {
        let checkpoint = stored.get(partition).copied().flatten();
        metrics.set_lag_events(partition, lag_events(properties, checkpoint));
        held.insert(
            partition.clone(),
            (!properties.is_empty).then_some(properties.last_enqueued_sequence_number),
        );
    }
    Ok(held)
}

/// How long a poll may take before the hub counts as out of reach: the balancing interval,
/// and no less than 5 s, so that a busy machine's slow answers (the SDK asks the partitions
/// one after another) are not taken for a hub out of reach. Bounded by the interval alone,
/// 32 partitions beside 8 replicas on 2 cores took longer at every poll, and the replica was
/// never ready.
fn answer_within(interval: Duration) -> Duration {
    interval.max(Duration::from_secs(5))
}

/// The lag monitor of a session, on a client of its own.
pub(super) struct Monitor {
    pub(super) hub: ConsumerClient,
    pub(super) partitions: Vec<String>,
    pub(super) checkpoints: Arc<PartitionCheckpoints>,
    pub(super) metrics: Arc<Metrics>,
    /// The balancing interval: how often the hub is asked.
    pub(super) interval: Duration,
    /// The readings' progress, for the stall watchdog.
    pub(super) readings: Readings,
    /// Told of stalled receivers.
    pub(super) health: SessionHealth,
}

impl Monitor {
    /// Reports every partition's lag every interval, whether the hub answers
    /// (`source_connected`), and stalled receivers, until `reading` is cancelled; returns
    /// its client, to be closed.
    pub(super) async fn run(self, reading: CancellationToken) -> ConsumerClient {
        let Monitor {
            hub,
            partitions,
            checkpoints,
            metrics,
            interval,
            readings,
            health,
        } = self;
        let late_after = answer_within(interval);
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watchdog = Watchdog::new(stall::stall_after(interval));
        let mut connected = Connected::new(&metrics);
        loop {
            if reading.run_until_cancelled(ticker.tick()).await.is_none() {
                break;
            }
            let before = readings.snapshot();
            // A poll later than `late_after` is dropped and asked again at the next tick:
            // an answer that never comes must not stop the monitor. The SDK's `$management`
            // link matches no answer to its request, so a dropped call's late answer may be
            // taken for the next call's, once.
            let poll = poll(&hub, &partitions, &checkpoints, &metrics);
            let polled = match reading
                .run_until_cancelled(tokio::time::timeout(late_after, poll))
                .await
            {
                None => break,
                Some(Ok(polled)) => polled,
                Some(Err(_)) => {
                    connected.lost(format!("the hub does not answer within {late_after:?}"));
                    continue;
                }
            };
            match polled {
                Ok(held) => {
                    let stalls = watchdog.observe(before, &held, Instant::now());
                    if !stalls.is_empty() {
                        let partitions: Vec<&str> =
                            stalls.iter().map(|s| s.partition.as_str()).collect();
                        tracing::warn!(
                            ?partitions,
                            "partition receivers stalled: the hub holds events they do not deliver; ending the session to read on through a new connection"
                        );
                        health.stalled(&stalls);
                    }
                    connected.answered();
                }
                Err(PollError::Store(cause)) => {
                    tracing::warn!(%cause, "the partitions' lag is not updated");
                    connected.answered();
                }
                Err(err @ PollError::Hub { .. }) => connected.lost(err.to_string()),
            }
        }
        hub
    }
}

/// Whether the hub answers, as `source_connected` and a log line at each change (and one
/// per poll while it does not).
struct Connected<'a> {
    metrics: &'a Metrics,
    answered: Option<bool>,
}

impl<'a> Connected<'a> {
    fn new(metrics: &'a Metrics) -> Connected<'a> {
        Connected {
            metrics,
            answered: None,
        }
    }

    fn answered(&mut self) {
        if self.answered != Some(true) {
            tracing::info!("Event Hubs source connected");
            self.metrics.set_source_connected(true);
        }
        self.answered = Some(true);
    }

    fn lost(&mut self, cause: String) {
        self.metrics.set_source_connected(false);
        tracing::warn!(%cause, "Event Hubs source: the hub is out of reach; the receivers retry, and the processor opens them again");
        self.answered = Some(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(begin: i64, last: i64, is_empty: bool) -> EventHubPartitionProperties {
        EventHubPartitionProperties {
            id: "0".into(),
            eventhub: "hub".into(),
            beginning_sequence_number: begin,
            last_enqueued_sequence_number: last,
            last_enqueued_offset: String::new(),
            last_enqueued_time_utc: None,
            is_empty,
        }
    }

    #[test]
    fn lag_is_what_was_enqueued_after_the_checkpoint() {
        assert_eq!(lag_events(&partition(0, 99, false), Some(89)), 10);
        assert_eq!(lag_events(&partition(0, 99, false), Some(99)), 0);
        // Without checkpoint: every retained event (sequence numbers begin at 0, and
        // after retention removed some, at the first retained one).
        assert_eq!(lag_events(&partition(0, 99, false), None), 100);
        assert_eq!(lag_events(&partition(40, 99, false), None), 60);
        assert_eq!(lag_events(&partition(0, -1, true), None), 0);
        // A checkpoint older than what the hub retains counts the retained events only;
        // one ahead of the hub (a hub recreated) counts none.
        assert_eq!(lag_events(&partition(40, 99, false), Some(9)), 60);
        assert_eq!(lag_events(&partition(0, 5, false), Some(9)), 0);
    }

    #[test]
    fn a_poll_is_late_after_the_interval_and_no_sooner_than_5_s() {
        assert_eq!(
            answer_within(Duration::from_secs(2)),
            Duration::from_secs(5)
        );
        assert_eq!(
            answer_within(Duration::from_secs(10)),
            Duration::from_secs(10)
        );
    }
}

//! The checkpoint lag of every partition of the hub, in events: the partition's last
//! enqueued sequence number (the hub's `$management` answer) minus this consumer group's
//! checkpoint (the checkpoint store), for every partition, owned by this replica or not.
//! Every replica reports it for every partition, so an autoscaler takes `max by
//! (partition)` and sums over partitions. Polled every load-balancing interval; a poll the
//! hub does not answer also tells the source that the hub is out of reach.

use std::collections::HashMap;

use azure_messaging_eventhubs::ConsumerClient;
use azure_messaging_eventhubs::models::EventHubPartitionProperties;

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
pub(super) async fn poll(
    hub: &ConsumerClient,
    partitions: &[String],
    checkpoints: &PartitionCheckpoints,
    metrics: &Metrics,
) -> Result<HashMap<String, Option<i64>>, PollError> {
    // All at once: one after another, 32 partitions' answers took longer than a 2 s
    // balancing interval on a busy machine, and the source reported the hub out of reach.
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
}

//! The `replica-killed` scenario's event: at a third of the flight the second writer
//! replica is killed (see [`super::replicas`] for what a kill does in-process), and the
//! time until the replica left reads every partition is measured.

use std::time::{Duration, Instant};

use super::replicas::Replicas;
use super::transport::HUB_PARTITIONS;
use crate::report::PartitionMove;

/// The replica killed: the second one started.
const VICTIM: usize = 1;

/// The kill and the move it causes.
pub(super) struct Kill {
    /// When into the flight the replica is killed.
    after: Duration,
    /// The killed replica's name.
    pub(super) victim: String,
    /// The partitions it read when killed.
    pub(super) partitions: Vec<String>,
    /// When it was killed: into the flight, and the instant.
    killed: Option<(Duration, Instant)>,
    /// From the kill until the other replica read every partition.
    moved_after: Option<Duration>,
}

impl Kill {
    /// A kill `after` into the flight.
    pub(super) fn at(after: Duration) -> Kill {
        Kill {
            after,
            victim: String::new(),
            partitions: Vec::new(),
            killed: None,
            moved_after: None,
        }
    }

    /// Whether the kill or the move is still to come.
    pub(super) fn pending(&self) -> bool {
        self.moved_after.is_none()
    }

    /// Kills the replica once its time has come (`started` is the flight's start), then
    /// notes when the partitions have moved.
    pub(super) fn watch(&mut self, replicas: &mut Replicas, started: Instant) {
        match self.killed {
            None if started.elapsed() >= self.after => {
                if let Some(replica) = replicas.get(VICTIM) {
                    self.victim = replica.name().to_owned();
                    self.partitions = replica.owned().into_iter().collect();
                }
                replicas.kill(VICTIM);
                self.killed = Some((started.elapsed(), Instant::now()));
                tracing::info!(replica = %self.victim, partitions = ?self.partitions, "writer replica killed");
            }
            Some((_, at)) if replicas.cover(HUB_PARTITIONS) => {
                self.moved_after = Some(at.elapsed());
            }
            _ => {}
        }
    }

    /// What the report says of it.
    pub(super) fn report(self, ownership_expiry: Duration) -> PartitionMove {
        PartitionMove {
            killed: self.victim,
            partitions: self.partitions,
            killed_at_secs: self.killed.map_or(0.0, |(into, _)| into.as_secs_f64()),
            ownership_expiry_secs: ownership_expiry.as_secs_f64(),
            moved_after_secs: self.moved_after.map(|d| d.as_secs_f64()),
        }
    }
}

//! The counts read back from [`Metrics`](super::Metrics): what the tests, the summary line
//! and the import report read.

use std::collections::BTreeMap;

use telemetry::wire::InvalidReason;

use super::DropReason;

/// Counts read back from [`Metrics`](super::Metrics), for tests, the summary line and the import report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Messages received from the source.
    pub received: u64,
    /// Positions those messages carried (a batch carries several).
    pub positions: u64,
    /// Latest-position documents written.
    pub written: u64,
    /// History documents written.
    pub history_written: u64,
    /// Agent facts (connection state, version) written onto latest documents.
    pub agent_written: u64,
    /// Positions dropped, by reason (a message of one position counts once).
    pub dropped: BTreeMap<DropReason, u64>,
    /// Invalid messages (dropped as [`DropReason::Invalid`]) by why they are invalid;
    /// reasons with none are left out.
    pub invalid: BTreeMap<InvalidReason, u64>,
    /// Positions being written.
    pub in_flight: i64,
    /// History documents not written (refused, or stale while retried).
    pub history_dropped: u64,
    /// Event Hubs events received again that this process had already taken (counted in
    /// `received` too): after a partition came back or the source rebuilt its session.
    pub read_again: u64,
}

impl Counts {
    /// Dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped.get(&reason).copied().unwrap_or(0)
    }

    /// Positions and agent facts with a final outcome: written, or dropped for any reason
    /// (superseded is one).
    pub fn finished(&self) -> u64 {
        self.written + self.agent_written + self.dropped.values().sum::<u64>()
    }
}

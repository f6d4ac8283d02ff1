//! One MQTT link as the agent sees it: what it carries in flight, the live messages
//! waiting for room, and the backlog it drains.

use std::collections::{HashMap, HashSet, VecDeque};

use super::Agent;
use crate::batch::Batching;
use crate::buffer::{DiskBuffer, Record};
use crate::transport::Publisher;

/// One live connection's bookkeeping.
pub(super) struct Link {
    pub(super) id: u64,
    pub(super) publisher: Publisher,
    pub(super) max_inflight: usize,
    /// New messages to publish before any backlog, each one or more records.
    pub(super) live: VecDeque<Vec<Record>>,
    /// The backlog continues at this id.
    pub(super) backlog_from: u64,
    /// The other records of each batch on this link, by the record the publisher knows
    /// the batch by (its first).
    pub(super) batches: HashMap<u64, Vec<u64>>,
    /// Every record in `batches`.
    pub(super) in_batches: HashSet<u64>,
}

impl Link {
    pub(super) fn new(id: u64, publisher: Publisher, max_inflight: u16) -> Link {
        Link {
            id,
            publisher,
            max_inflight: usize::from(max_inflight.max(1)),
            live: VecDeque::new(),
            backlog_from: 0,
            batches: HashMap::new(),
            in_batches: HashSet::new(),
        }
    }

    pub(super) fn in_flight(&self) -> usize {
        self.publisher.in_flight()
    }

    /// Whether `record` is on this link and not yet acknowledged.
    pub(super) fn carries(&self, record: u64) -> bool {
        self.publisher.carries(record) || self.in_batches.contains(&record)
    }

    /// Notes that the publish of `first` carries `others` too.
    pub(super) fn carry(&mut self, first: u64, others: Vec<u64>) {
        if !others.is_empty() {
            self.in_batches.extend(others.iter().copied());
            self.batches.insert(first, others);
        }
    }

    /// The records the broker acknowledged with the publish of `first`.
    pub(super) fn acked(&mut self, first: u64) -> Vec<u64> {
        let mut records = vec![first];
        if let Some(others) = self.batches.remove(&first) {
            for record in &others {
                self.in_batches.remove(record);
            }
            records.extend(others);
        }
        records
    }

    /// Whether a backlog message may go now: one is waiting, and a slot stays free for
    /// live messages.
    pub(super) fn backlog_slot(&self, agent: &Agent) -> bool {
        let reserve = usize::from(self.max_inflight > 1);
        let before = agent.batching.as_ref().and_then(Batching::first_held);
        self.live.is_empty()
            && self.in_flight() + reserve < self.max_inflight
            && self.next_backlog(&agent.buffer, before).is_some()
    }

    /// The oldest buffered record not on this link, before the batch being gathered.
    pub(super) fn next_backlog(&self, buffer: &DiskBuffer, before: Option<u64>) -> Option<u64> {
        buffer
            .pending_from(self.backlog_from)
            .take_while(|id| before.is_none_or(|before| *id < before))
            .find(|id| !self.carries(*id))
    }
}

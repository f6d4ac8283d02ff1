//! A physical partition's state: its documents by logical partition, its RU budget, and the
//! counters of the heat map.

use super::doc::{Doc, unix_now};
use crate::ru::Bucket;
use cosmos_wire::priority::Priority;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Seconds of per-second RU history kept per partition.
const HISTORY_SECONDS: usize = 300;

/// The documents of one logical partition, by id.
pub type LogicalPartition = FxHashMap<String, Arc<Doc>>;

/// A physical partition's mutable state.
#[derive(Debug)]
pub struct Partition {
    /// Documents by partition key (canonical JSON of the value), then by id.
    pub docs: FxHashMap<String, LogicalPartition>,
    /// The RU budget.
    pub bucket: Bucket,
    /// Counters for the heat map.
    pub counters: Counters,
}

/// What a partition has served.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// RU charged in total.
    pub ru_total: f64,
    /// Operations served (successful or not, not counting throttled ones).
    pub operations: u64,
    /// Operations answered 429.
    pub throttled: u64,
    /// Of those, low-priority operations.
    pub throttled_low_priority: u64,
    /// RU charged per second, as `(unix second, RU)`, oldest first.
    pub history: VecDeque<(u64, f64)>,
    /// RU charged by the `kind` of the document operated on (`""`: none, or a query).
    pub ru_by_kind: BTreeMap<String, f64>,
}

impl Counters {
    /// Records an operation answered 429.
    pub fn throttle(&mut self, priority: Priority) {
        self.throttled += 1;
        if priority == Priority::Low {
            self.throttled_low_priority += 1;
        }
    }

    /// Records an operation and its charge.
    pub fn charge(&mut self, ru: f64) {
        self.ru_total += ru;
        self.operations += 1;
        let now = unix_now();
        match self.history.back_mut() {
            Some((sec, total)) if *sec == now => *total += ru,
            _ => {
                self.history.push_back((now, ru));
                if self.history.len() > HISTORY_SECONDS {
                    self.history.pop_front();
                }
            }
        }
    }
}

impl Counters {
    /// Counts `ru` under the document kind `kind` (the operation is counted by [`charge`]).
    ///
    /// [`charge`]: Counters::charge
    pub fn charge_kind(&mut self, kind: &str, ru: f64) {
        match self.ru_by_kind.get_mut(kind) {
            Some(total) => *total += ru,
            None => {
                self.ru_by_kind.insert(kind.to_owned(), ru);
            }
        }
    }
}

impl Partition {
    pub(super) fn new(rate: f64) -> Self {
        Self {
            docs: FxHashMap::default(),
            bucket: Bucket::new(rate),
            counters: Counters::default(),
        }
    }

    /// Number of documents.
    pub fn document_count(&self) -> usize {
        self.docs.values().map(|p| p.len()).sum()
    }
}

//! A container and its partition key ranges: finding the range of an EPK or an id, throughput
//! shared across the live ranges, and splitting a range in two.

use super::key::pk_epk_of_canonical;
use super::partition::Partition;
use cosmos_wire::epk::{boundary_to_u128, even_ranges, u128_to_boundary};
use cosmos_wire::indexing::IndexingPolicy;
use cosmos_wire::resources::{PartitionKeyDefinition, PartitionKeyRange};
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A partition key range: one physical partition.
#[derive(Debug)]
pub struct Range {
    /// The range id.
    pub id: String,
    /// Lowest EPK.
    pub min: u128,
    /// EPK past the range.
    pub max: u128,
    /// Ranges this one was split from.
    pub parents: Vec<String>,
    /// Documents, budget, counters.
    pub part: Mutex<Partition>,
}

impl Range {
    /// Whether an EPK belongs here.
    pub fn contains(&self, epk: u128) -> bool {
        self.min <= epk && epk < self.max
    }

    /// The wire form.
    pub fn to_wire(&self) -> PartitionKeyRange {
        PartitionKeyRange {
            id: self.id.clone(),
            min_inclusive: u128_to_boundary(self.min),
            max_exclusive: u128_to_boundary(self.max),
            parents: self.parents.clone(),
        }
    }
}

/// The ranges of a container: the live ones, ordered by EPK, and the ids split away.
#[derive(Debug, Default)]
pub struct Ranges {
    /// Live ranges, ordered by `min`.
    pub live: Vec<Arc<Range>>,
    /// Ranges split away (they answer 410/1002), kept for their counters.
    pub gone: Vec<Arc<Range>>,
    next_id: u64,
}

impl Ranges {
    /// The live range that holds an EPK.
    pub fn for_epk(&self, epk: u128) -> Arc<Range> {
        let i = self.live.partition_point(|r| r.max <= epk);
        self.live[i.min(self.live.len() - 1)].clone()
    }

    /// A live range by id, or `Err(true)` if it was split away, `Err(false)` if unknown.
    pub fn by_id(&self, id: &str) -> Result<Arc<Range>, bool> {
        if let Some(r) = self.live.iter().find(|r| r.id == id) {
            return Ok(r.clone());
        }
        Err(self.gone.iter().any(|r| r.id == id))
    }
}

impl Ranges {
    /// `partitions` ranges over even shares of the EPK space, sharing `ru_per_sec` evenly.
    pub(super) fn even(partitions: usize, ru_per_sec: f64) -> Self {
        let share = ru_per_sec / partitions as f64;
        let live = even_ranges(partitions)
            .into_iter()
            .enumerate()
            .map(|(i, (lo, hi))| {
                Arc::new(Range {
                    id: i.to_string(),
                    min: boundary_to_u128(&lo).expect("even_ranges gives valid boundaries"),
                    max: boundary_to_u128(&hi).expect("even_ranges gives valid boundaries"),
                    parents: Vec::new(),
                    part: Mutex::new(Partition::new(share)),
                })
            })
            .collect();
        Self {
            live,
            gone: Vec::new(),
            next_id: partitions as u64,
        }
    }
}

/// A container.
#[derive(Debug)]
pub struct Container {
    /// Its name.
    pub id: String,
    /// Its resource id.
    pub rid: String,
    /// The partition key definition.
    pub partition_key: PartitionKeyDefinition,
    /// The properties as returned (id, partitionKey, indexingPolicy, system properties).
    pub body: Value,
    /// The partition key path split into its segments.
    pub pk_path: Vec<String>,
    /// Its indexing policy: which terms a write indexes, which paths a query may order by.
    pub indexing: IndexingPolicy,
    /// `dbs/{db rid}/colls/{rid}/`.
    pub(super) self_link: String,
    /// Provisioned RU/s (f64 bits), split evenly across the live ranges.
    pub(super) ru_per_sec: AtomicU64,
    /// The ranges.
    pub ranges: RwLock<Ranges>,
    pub(super) next_doc: AtomicU64,
}

impl Container {
    /// Provisioned RU/s.
    pub fn ru_per_sec(&self) -> f64 {
        f64::from_bits(self.ru_per_sec.load(Ordering::Relaxed))
    }

    /// Changes the provisioned RU/s; every live range gets an even share.
    pub fn set_ru_per_sec(&self, ru: f64) {
        self.ru_per_sec.store(ru.to_bits(), Ordering::Relaxed);
        let ranges = self.ranges.read();
        let share = ru / ranges.live.len() as f64;
        for r in &ranges.live {
            r.part.lock().bucket.set_rate(share);
        }
    }

    /// `dbs/{db rid}/colls/{rid}/`, the prefix of its documents' `_self`.
    pub fn self_link(&self) -> &str {
        &self.self_link
    }

    /// A fresh document resource id.
    pub fn next_doc_rid(&self) -> u64 {
        self.next_doc.fetch_add(1, Ordering::Relaxed)
    }

    /// Splits a live range at its EPK midpoint into two children that share its documents; the
    /// old id then answers 410/1002. Returns the children, or `None` if the id is not live or
    /// the range is too narrow.
    pub fn split(&self, range_id: &str) -> Option<(PartitionKeyRange, PartitionKeyRange)> {
        let mut ranges = self.ranges.write();
        let pos = ranges.live.iter().position(|r| r.id == range_id)?;
        let old = ranges.live[pos].clone();
        let mid = old.min + (old.max - old.min) / 2;
        if mid <= old.min || mid >= old.max {
            return None;
        }
        let share = self.ru_per_sec() / (ranges.live.len() + 1) as f64;
        let mut make = |min, max| {
            let id = ranges.next_id.to_string();
            ranges.next_id += 1;
            Arc::new(Range {
                id,
                min,
                max,
                parents: vec![old.id.clone()],
                part: Mutex::new(Partition::new(share)),
            })
        };
        let (left, right) = (make(old.min, mid), make(mid, old.max));
        {
            let mut from = old.part.lock();
            let (mut l, mut r) = (left.part.lock(), right.part.lock());
            for (pk, docs) in from.docs.drain() {
                let target = if left.contains(pk_epk_of_canonical(&pk)) {
                    &mut l
                } else {
                    &mut r
                };
                target.docs.insert(pk, docs);
            }
        }
        let wire = (left.to_wire(), right.to_wire());
        ranges.live.splice(pos..=pos, [left, right]);
        ranges.gone.push(old);
        for r in &ranges.live {
            r.part.lock().bucket.set_rate(share);
        }
        Some(wire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CreateError, PartitionKey, Store};
    use serde_json::json;

    fn container(store: &Store, partitions: usize) -> Arc<Container> {
        store.create_database("db").unwrap();
        store
            .create_container(
                "db",
                &json!({"id":"c","partitionKey":{"paths":["/deviceId"],"kind":"Hash"}}),
                partitions,
                1000.0,
            )
            .unwrap()
    }

    #[test]
    fn container_gets_even_ranges_and_version_2() {
        let store = Store::default();
        let c = container(&store, 4);
        assert_eq!(c.partition_key.version, Some(2));
        let ranges = c.ranges.read();
        assert_eq!(ranges.live.len(), 4);
        assert_eq!(ranges.live[0].min, 0);
        assert_eq!(ranges.live[3].max, cosmos_wire::epk::EPK_SPACE_END);
        assert_eq!(ranges.live[0].part.lock().bucket.rate(), 250.0);
        assert_eq!(
            store.create_database("db").unwrap_err(),
            CreateError::Conflict
        );
    }

    #[test]
    fn split_moves_documents_by_epk_and_retires_the_old_id() {
        let store = Store::default();
        let c = container(&store, 1);
        {
            let ranges = c.ranges.read();
            let mut part = ranges.live[0].part.lock();
            for i in 0..200 {
                let key = PartitionKey::from_value(&json!(format!("drone-{i}")));
                part.docs.entry(key.canonical).or_default();
            }
        }
        let (l, r) = c.split("0").unwrap();
        assert_eq!(l.parents, vec!["0".to_string()]);
        assert_eq!(l.max_exclusive, r.min_inclusive);
        let ranges = c.ranges.read();
        assert!(ranges.by_id("0").unwrap_err());
        let (a, b) = (ranges.live[0].part.lock(), ranges.live[1].part.lock());
        assert_eq!(a.docs.len() + b.docs.len(), 200);
        assert!(a.docs.len() > 50 && b.docs.len() > 50);
        for pk in a.docs.keys() {
            assert!(ranges.live[0].contains(pk_epk_of_canonical(pk)));
        }
        assert_eq!(a.bucket.rate(), 500.0);
    }
}

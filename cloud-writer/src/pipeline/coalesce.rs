//! Coalescing within a batch: of several positions of one drone, only the newest (by
//! [`telemetry::order::PositionOrder`]) goes on to be written; the others are superseded.
//!
//! Also owns [`DeviceHasher`], the hasher of the writer's per-drone maps.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use telemetry::PositionOrder;

/// Something with a drone and a place in that drone's newest-wins order.
pub trait Ordered {
    /// The drone.
    fn device_id(&self) -> &str;
    /// Its place in the drone's order.
    fn order(&self) -> PositionOrder;
}

/// A fast, non-cryptographic hasher for device ids: eight bytes at a time, each mixed in
/// with a folded multiply (the 128-bit product's halves xored, as foldhash and ahash do),
/// which carries every input bit into both halves of the state. Device ids are
/// authenticated identities and every map keyed by them is bounded, so SipHash's
/// protection against chosen collisions is not worth its cost per message.
#[derive(Debug, Default, Clone, Copy)]
pub struct DeviceHasher(u64);

/// Builds [`DeviceHasher`]s, for `HashMap<String, _, BuildDeviceHasher>`.
pub type BuildDeviceHasher = BuildHasherDefault<DeviceHasher>;

impl DeviceHasher {
    /// The digits of pi: odd, no structure.
    const K: u64 = 0x243f_6a88_85a3_08d3;

    fn add(&mut self, word: u64) {
        let product = u128::from(self.0 ^ word) * u128::from(Self::K);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for DeviceHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        // `str`'s Hash writes a 0xff terminator after the bytes.
        self.add(u64::from(byte));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Keeps the newest item per drone of one batch, in order of first appearance.
#[derive(Debug)]
pub struct Coalescer<T> {
    index: HashMap<String, usize, BuildDeviceHasher>,
    /// Spare keys of earlier batches, reused so that a batch allocates no key.
    spare_keys: Vec<String>,
    winners: Vec<T>,
}

impl<T> Default for Coalescer<T> {
    fn default() -> Self {
        Coalescer {
            index: HashMap::default(),
            spare_keys: Vec::new(),
            winners: Vec::new(),
        }
    }
}

impl<T: Ordered> Coalescer<T> {
    /// Offers an item; returns the item it superseded, or itself if an item at least as
    /// new is already kept (an equal order is a replay and does not replace).
    pub fn offer(&mut self, item: T) -> Option<T> {
        if let Some(&i) = self.index.get(item.device_id()) {
            let kept = &mut self.winners[i];
            return if item.order().is_newer_than(kept.order()) {
                Some(std::mem::replace(kept, item))
            } else {
                Some(item)
            };
        }
        let mut key = self.spare_keys.pop().unwrap_or_default();
        key.clear();
        key.push_str(item.device_id());
        self.index.insert(key, self.winners.len());
        self.winners.push(item);
        None
    }

    /// Number of drones kept.
    pub fn len(&self) -> usize {
        self.winners.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.winners.is_empty()
    }

    /// Takes the kept items, leaving the coalescer empty for the next batch.
    pub fn drain(&mut self) -> std::vec::Drain<'_, T> {
        self.spare_keys
            .extend(self.index.drain().map(|(key, _)| key));
        self.winners.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Item(String, i64, u64);

    impl Ordered for Item {
        fn device_id(&self) -> &str {
            &self.0
        }
        fn order(&self) -> PositionOrder {
            PositionOrder {
                device_time_ms: self.1,
                seq: self.2,
            }
        }
    }

    #[test]
    fn newest_wins_in_any_arrival_order() {
        let mut c = Coalescer::default();
        assert_eq!(c.offer(Item("a".into(), 10, 1)), None);
        assert_eq!(
            c.offer(Item("a".into(), 30, 3)),
            Some(Item("a".into(), 10, 1))
        );
        assert_eq!(
            c.offer(Item("a".into(), 20, 2)),
            Some(Item("a".into(), 20, 2))
        );
        assert_eq!(
            c.offer(Item("a".into(), 30, 3)),
            Some(Item("a".into(), 30, 3))
        );
        assert_eq!(c.offer(Item("b".into(), 5, 1)), None);
        let kept: Vec<Item> = c.drain().collect();
        assert_eq!(kept, [Item("a".into(), 30, 3), Item("b".into(), 5, 1)]);
        assert!(c.is_empty());
    }

    #[test]
    fn device_hashes_spread_over_the_low_bits() {
        let mut buckets = vec![0u32; 1024];
        let mut hashes = std::collections::HashSet::new();
        for i in 0..16_384 {
            let hash = BuildDeviceHasher::default().hash_one(format!("drone-{i:05}"));
            assert!(hashes.insert(hash), "a collision at drone-{i:05}");
            buckets[(hash & 1023) as usize] += 1;
        }
        // 16 per bucket on average; a hash that kept the id's structure in the low bits
        // would pile them up.
        assert!(buckets.iter().all(|&n| n <= 48), "{buckets:?}");
    }

    proptest! {
        #[test]
        fn keeps_the_maximum_of_each_drone(items in proptest::collection::vec((0u8..5, 0i64..50, 0u64..5), 1..60)) {
            let mut c = Coalescer::default();
            let mut superseded = 0;
            for (d, t, s) in &items {
                superseded += usize::from(c.offer(Item(d.to_string(), *t, *s)).is_some());
            }
            prop_assert_eq!(superseded + c.len(), items.len());
            for kept in c.drain() {
                let max = items.iter().filter(|(d, ..)| d.to_string() == kept.0).map(|(_, t, s)| (*t, *s)).max().unwrap();
                prop_assert_eq!((kept.1, kept.2), max);
            }
        }
    }
}

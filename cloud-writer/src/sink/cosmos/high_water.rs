//! The in-memory high-water mark per drone: the newest position known to be stored (and,
//! when known, the stored document's ETag). A position at or below it is superseded
//! without spending a request. Stored positions only ever move forward, so a mark can be
//! stale (too low) but never wrong (too high): it is an optimisation, the server-side
//! condition stays the guarantee.
//!
//! Bounded: two generations of at most `capacity / 2` drones each; when the young one
//! fills, the old one is dropped (an approximate LRU at O(1) per operation).

use telemetry::PositionOrder;

use rustc_hash::FxHashMap;

/// What is known of a drone's stored document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The newest position known stored.
    pub order: PositionOrder,
    /// The stored document's ETag, when it is known to be the one at `order`.
    pub etag: Option<String>,
}

/// Per-drone high-water marks, bounded.
#[derive(Debug)]
pub struct HighWater {
    generation: usize,
    young: FxHashMap<String, Mark>,
    old: FxHashMap<String, Mark>,
}

impl HighWater {
    /// Marks for up to `capacity` drones (at least 2).
    pub fn new(capacity: usize) -> Self {
        HighWater {
            generation: (capacity / 2).max(1),
            young: FxHashMap::default(),
            old: FxHashMap::default(),
        }
    }

    /// The mark of `device`, if remembered.
    pub fn get(&mut self, device: &str) -> Option<&Mark> {
        if !self.young.contains_key(device) {
            let mark = self.old.remove(device)?;
            self.insert(device.to_owned(), mark);
        }
        self.young.get(device)
    }

    /// Whether `order` is at or below the drone's mark (known superseded).
    #[cfg(test)]
    pub fn is_superseded(&mut self, device: &str, order: PositionOrder) -> bool {
        self.get(device).is_some_and(|mark| order <= mark.order)
    }

    /// Records that `order` (with `etag`) is stored for `device`. A lower order than the
    /// current mark is ignored; an equal one updates the ETag.
    pub fn raise(&mut self, device: &str, order: PositionOrder, etag: Option<String>) {
        let current = self.get(device).map(|m| m.order);
        if current.is_some_and(|c| order < c) {
            return;
        }
        self.insert(device.to_owned(), Mark { order, etag });
    }

    /// Forgets the ETag of `device` (it proved stale).
    pub fn forget_etag(&mut self, device: &str) {
        if let Some(mark) = self.young.get_mut(device) {
            mark.etag = None;
        }
        if let Some(mark) = self.old.get_mut(device) {
            mark.etag = None;
        }
    }

    /// Drones remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    fn insert(&mut self, device: String, mark: Mark) {
        if self.young.len() >= self.generation && !self.young.contains_key(&device) {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(device, mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(t: i64, s: u64) -> PositionOrder {
        PositionOrder {
            device_time_ms: t,
            seq: s,
        }
    }

    #[test]
    fn marks_only_rise() {
        let mut hw = HighWater::new(10);
        assert!(!hw.is_superseded("a", o(1, 1)));
        hw.raise("a", o(5, 1), Some("e1".into()));
        assert!(hw.is_superseded("a", o(5, 1)));
        assert!(hw.is_superseded("a", o(4, 9)));
        assert!(!hw.is_superseded("a", o(5, 2)));
        hw.raise("a", o(3, 0), None);
        assert_eq!(hw.get("a").unwrap().order, o(5, 1));
        hw.forget_etag("a");
        assert_eq!(hw.get("a").unwrap().etag, None);
    }

    #[test]
    fn stays_bounded_and_keeps_recent_drones() {
        let mut hw = HighWater::new(100);
        for i in 0..1000 {
            hw.raise(&format!("d{i}"), o(i, 0), None);
            assert!(hw.len() <= 100);
            // Touching d0 keeps it alive.
            let _ = hw.get("d0");
            hw.raise("d0", o(0, 0), None);
        }
        assert!(hw.get("d0").is_some());
        assert!(hw.get("d999").is_some());
        assert!(hw.get("d1").is_none());
    }
}

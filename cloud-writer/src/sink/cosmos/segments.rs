//! Positions held for track segments, no I/O: per (drone, stretch) the points waiting for
//! their segment write and the acknowledgements of their messages, and per drone the
//! segment this writer last stored (its ETag and points), so that the next write of that
//! stretch is one Replace with `ifMatch` and no read.
//!
//! A held stretch is due ([`Segments::due`]) when it has been held for `HISTORY_HOLD`, or
//! at once when a position of a later stretch of the same drone arrives (the drone moved
//! on: nothing more is coming for it). Its messages stay unacknowledged until the write is
//! final: holding costs in-flight messages (about drones × hold ÷ report interval) and
//! checkpoint lag (up to the hold), never a position.

use std::collections::HashMap;
use std::time::Duration;

use telemetry::document::{SegmentPoint, merge_points, segment_start};
use tokio::time::Instant;

use crate::source::Ack;

/// One stretch of one drone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct StretchKey {
    pub(super) device_id: String,
    pub(super) start_ms: i64,
}

/// What is held for one stretch.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) points: Vec<SegmentPoint>,
    pub(super) acks: Vec<Ack>,
    since: Instant,
}

/// The segment of a drone as this writer last stored it.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) start_ms: i64,
    pub(super) etag: String,
    pub(super) points: Vec<SegmentPoint>,
}

/// The held stretches and the stored segments this writer knows.
#[derive(Debug)]
pub(super) struct Segments {
    span_ms: i64,
    hold: Duration,
    held: HashMap<StretchKey, Held>,
    /// At most one per drone (its latest stretch written), at most `capacity` drones.
    stored: HashMap<String, Stored>,
    capacity: usize,
}

impl Segments {
    pub(super) fn new(span: Duration, hold: Duration, capacity: usize) -> Self {
        Segments {
            span_ms: i64::try_from(span.as_millis()).unwrap_or(i64::MAX).max(1),
            hold,
            held: HashMap::new(),
            stored: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// The stretch `[start, end)` of a key.
    pub(super) fn stretch(&self, key: &StretchKey) -> (i64, i64) {
        (key.start_ms, key.start_ms.saturating_add(self.span_ms))
    }

    /// Holds a position (its point and its message's acknowledgement); returns the
    /// drone's earlier stretches, now due.
    pub(super) fn hold(
        &mut self,
        device_id: &str,
        point: SegmentPoint,
        ack: Ack,
        now: Instant,
    ) -> Vec<(StretchKey, Held)> {
        let key = StretchKey {
            device_id: device_id.to_owned(),
            start_ms: segment_start(point.device_time_ms, self.span_ms),
        };
        let earlier: Vec<StretchKey> = self
            .held
            .keys()
            .filter(|k| k.device_id == key.device_id && k.start_ms < key.start_ms)
            .cloned()
            .collect();
        let held = self.held.entry(key).or_insert_with(|| Held {
            points: Vec::new(),
            acks: Vec::new(),
            since: now,
        });
        held.points.push(point);
        held.acks.push(ack);
        earlier
            .into_iter()
            .filter_map(|k| self.held.remove_entry(&k))
            .collect()
    }

    /// Takes the stretches held for the hold or longer.
    pub(super) fn due(&mut self, now: Instant) -> Vec<(StretchKey, Held)> {
        let due: Vec<StretchKey> = self
            .held
            .iter()
            .filter(|(_, h)| now.duration_since(h.since) >= self.hold)
            .map(|(k, _)| k.clone())
            .collect();
        due.into_iter()
            .filter_map(|k| self.held.remove_entry(&k))
            .collect()
    }

    /// Takes every held stretch (the sink closes).
    pub(super) fn take_all(&mut self) -> Vec<(StretchKey, Held)> {
        self.held.drain().collect()
    }

    /// Stretches held now.
    #[cfg(test)]
    pub(super) fn held_count(&self) -> usize {
        self.held.len()
    }

    /// The stored segment of `key`, when this writer knows it.
    pub(super) fn stored(&self, key: &StretchKey) -> Option<Stored> {
        self.stored
            .get(&key.device_id)
            .filter(|s| s.start_ms == key.start_ms)
            .cloned()
    }

    /// Remembers the segment of `key` as stored with `etag`; forgets it with `None`.
    pub(super) fn remember(
        &mut self,
        key: &StretchKey,
        stored: Option<(String, Vec<SegmentPoint>)>,
    ) {
        let Some((etag, points)) = stored else {
            self.stored.remove(&key.device_id);
            return;
        };
        if self.stored.len() >= self.capacity && !self.stored.contains_key(&key.device_id) {
            // Forgetting costs a read on the next write of that stretch, nothing else.
            if let Some(any) = self.stored.keys().next().cloned() {
                self.stored.remove(&any);
            }
        }
        self.stored.insert(
            key.device_id.clone(),
            Stored {
                start_ms: key.start_ms,
                etag,
                points,
            },
        );
    }
}

/// `held` merged into `stored` by `seq`, and how many points are new.
pub(super) fn merged(stored: &[SegmentPoint], held: &[SegmentPoint]) -> (Vec<SegmentPoint>, usize) {
    let mut points = stored.to_vec();
    let added = merge_points(&mut points, held.iter().copied());
    (points, added)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(seq: u64, device_time_ms: i64) -> SegmentPoint {
        SegmentPoint {
            seq,
            device_time_ms,
            lon: 1.0,
            lat: 2.0,
            alt_m: None,
            heading_deg: None,
            speed_mps: None,
            battery_pct: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stretch_is_due_after_the_hold_or_when_the_drone_moves_on() {
        let mut s = Segments::new(Duration::from_secs(300), Duration::from_secs(60), 10);
        let t0 = Instant::now();
        assert!(s.hold("d", point(1, 0), Ack::none(), t0).is_empty());
        assert!(s.hold("e", point(1, 0), Ack::none(), t0).is_empty());
        assert!(s.hold("d", point(2, 5_000), Ack::none(), t0).is_empty());
        assert!(s.due(t0 + Duration::from_secs(59)).is_empty());
        // The drone's next stretch begins: its first one is due at once.
        let moved = s.hold("d", point(3, 300_000), Ack::none(), t0);
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0].0.start_ms, 0);
        assert_eq!(moved[0].1.points.len(), 2);
        let due = s.due(t0 + Duration::from_secs(60));
        assert_eq!(due.len(), 2, "e's and d's second stretch");
        assert_eq!(s.held_count(), 0);
    }

    #[test]
    fn one_stored_segment_per_drone_within_capacity() {
        let mut s = Segments::new(Duration::from_secs(300), Duration::ZERO, 1);
        let key = |d: &str, start_ms| StretchKey {
            device_id: d.into(),
            start_ms,
        };
        s.remember(&key("d", 0), Some(("e1".into(), vec![point(1, 0)])));
        assert_eq!(s.stored(&key("d", 0)).unwrap().etag, "e1");
        assert!(s.stored(&key("d", 300_000)).is_none());
        s.remember(&key("e", 0), Some(("e2".into(), vec![])));
        assert!(s.stored(&key("d", 0)).is_none(), "capacity 1");
        s.remember(&key("e", 0), None);
        assert!(s.stored(&key("e", 0)).is_none());
        let (points, added) = merged(&[point(1, 0), point(3, 10)], &[point(3, 10), point(2, 5)]);
        assert_eq!(added, 1);
        assert_eq!(points.iter().map(|p| p.seq).collect::<Vec<_>>(), [1, 2, 3]);
    }
}

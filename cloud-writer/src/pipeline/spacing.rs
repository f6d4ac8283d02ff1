//! At most one write per drone per `MIN_WRITE_INTERVAL`: a drone written less than the
//! interval ago has its newest position held until the interval is up, and a newer one
//! arriving meanwhile takes its place. The position it replaces is superseded (counted, its
//! history document still written) and its message is acknowledged only when the write
//! that superseded it is final: its acknowledgement is carried by the newer position's
//! ([`Ack::carry`]). Nothing is held longer than the interval, and at shutdown every held
//! position is written.
//!
//! Cost: a drone reporting every 5 s with a 30 s interval is written once per 30 s instead
//! of six times (one sixth of the write RU); its newest position in Cosmos DB is up to 30 s
//! older than the newest the writer has received.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::time::Instant;

use super::Ordered;
use super::PositionWrite;

/// What became of a position offered to the spacing.
#[derive(Debug)]
pub enum Offer {
    /// Write it now.
    Write(PositionWrite),
    /// Held until its drone's interval is up.
    Held,
    /// Superseded by the held position of its drone (newer, or equal: a replay); its
    /// acknowledgement is carried by that position's.
    Superseded(PositionWrite),
}

/// One drone's last write and its held position.
#[derive(Debug)]
struct Drone {
    written_at: Instant,
    held: Option<PositionWrite>,
}

/// The drones' write times and held positions.
#[derive(Debug)]
pub struct Spacing {
    interval: Duration,
    drones: FxHashMap<String, Drone>,
    /// When each held position is due, earliest first.
    due: BinaryHeap<Reverse<(Instant, String)>>,
}

impl Spacing {
    /// At most one write per drone per `interval`.
    pub fn new(interval: Duration) -> Self {
        Spacing {
            interval,
            drones: FxHashMap::default(),
            due: BinaryHeap::new(),
        }
    }

    /// Offers the newest position of a drone in its batch, at `now`.
    pub fn offer(&mut self, write: PositionWrite, now: Instant) -> Offer {
        let Some(drone) = self.drones.get_mut(write.device_id()) else {
            self.drones.insert(
                write.device_id().to_string(),
                Drone {
                    written_at: now,
                    held: None,
                },
            );
            return Offer::Write(write);
        };
        match drone.held.as_mut() {
            Some(held) if write.order().is_newer_than(held.order()) => {
                write.ack.carry(held.ack.clone());
                Offer::Superseded(std::mem::replace(held, write))
            }
            Some(held) => {
                held.ack.carry(write.ack.clone());
                Offer::Superseded(write)
            }
            None if now >= drone.written_at + self.interval => {
                drone.written_at = now;
                Offer::Write(write)
            }
            None => {
                let due = drone.written_at + self.interval;
                self.due.push(Reverse((due, write.device_id().to_string())));
                drone.held = Some(write);
                Offer::Held
            }
        }
    }

    /// When the earliest held position is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    /// The held positions due by `now`, to write; their drones' intervals start again.
    /// Drones neither held nor written within the interval are forgotten.
    pub fn take_due(&mut self, now: Instant) -> Vec<PositionWrite> {
        let mut out = Vec::new();
        while let Some(Reverse((at, _))) = self.due.peek() {
            if *at > now {
                break;
            }
            let Reverse((_, device)) = self.due.pop().expect("peeked");
            if let Some(drone) = self.drones.get_mut(&device) {
                if let Some(write) = drone.held.take() {
                    drone.written_at = now;
                    out.push(write);
                }
            }
        }
        let interval = self.interval;
        if self.drones.len() > 2 * self.due.len() + 1024 {
            self.drones
                .retain(|_, d| d.held.is_some() || now < d.written_at + interval);
        }
        out
    }

    /// Every held position, at shutdown.
    pub fn drain(&mut self) -> Vec<PositionWrite> {
        self.due.clear();
        self.drones.drain().filter_map(|(_, d)| d.held).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use chrono::{TimeDelta, Utc};
    use telemetry::Position;

    use super::*;
    use crate::source::{Ack, AckSink};

    /// Records the messages acknowledged.
    #[derive(Default)]
    struct Acked(Mutex<Vec<u64>>);

    impl AckSink for Acked {
        fn done(&self, index: u64) {
            self.0.lock().unwrap().push(index);
        }
    }

    fn write(acked: &Arc<Acked>, device: &str, seq: u64) -> PositionWrite {
        PositionWrite {
            position: Position {
                device_id: device.into(),
                seq,
                ts: Utc::now() - TimeDelta::seconds(60 - seq as i64),
                lat: 1.0,
                lon: 1.0,
                alt_m: None,
                heading_deg: None,
                speed_mps: None,
                battery_pct: None,
                gnss: Default::default(),
            },
            enqueued: None,
            received_at: std::time::Instant::now(),
            ack: Ack::new(acked.clone(), seq),
        }
    }

    fn seq(offer: &Offer) -> Option<u64> {
        match offer {
            Offer::Write(w) | Offer::Superseded(w) => Some(w.position.seq),
            Offer::Held => None,
        }
    }

    #[test]
    fn one_write_per_interval_the_newest_and_acknowledged_only_with_it() {
        let acked = Arc::new(Acked::default());
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut spacing = Spacing::new(Duration::from_secs(30));
        let Offer::Write(first) = spacing.offer(write(&acked, "d", 1), t0) else {
            panic!("a drone not written yet is written at once");
        };
        first.ack.finish();
        assert!(matches!(
            spacing.offer(write(&acked, "d", 2), t0 + 5 * second),
            Offer::Held
        ));
        assert_eq!(spacing.next_due(), Some(t0 + 30 * second));
        // A newer one takes the held one's place; an older one is superseded by it.
        let replaced = spacing.offer(write(&acked, "d", 4), t0 + 10 * second);
        assert_eq!(seq(&replaced), Some(2));
        let older = spacing.offer(write(&acked, "d", 3), t0 + 15 * second);
        assert_eq!(seq(&older), Some(3));
        for offer in [replaced, older] {
            let (Offer::Superseded(w) | Offer::Write(w)) = offer else {
                unreachable!()
            };
            w.ack.finish();
        }
        assert_eq!(
            *acked.0.lock().unwrap(),
            [1],
            "superseded, not yet acknowledged"
        );
        assert!(spacing.take_due(t0 + 29 * second).is_empty());
        let due = spacing.take_due(t0 + 30 * second);
        assert_eq!(due.iter().map(|w| w.position.seq).collect::<Vec<_>>(), [4]);
        for w in due {
            w.ack.finish();
        }
        let mut done = acked.0.lock().unwrap().clone();
        done.sort_unstable();
        assert_eq!(
            done,
            [1, 2, 3, 4],
            "acknowledged with the write that superseded them"
        );
        // The interval starts again at that write.
        assert!(matches!(
            spacing.offer(write(&acked, "d", 5), t0 + 31 * second),
            Offer::Held
        ));
        assert_eq!(spacing.next_due(), Some(t0 + 60 * second));
        // Another drone is not held back by this one; at shutdown the held one is written.
        assert!(matches!(
            spacing.offer(write(&acked, "e", 1), t0 + 31 * second),
            Offer::Write(_)
        ));
        let left: Vec<u64> = spacing.drain().iter().map(|w| w.position.seq).collect();
        assert_eq!(left, [5]);
    }

    #[test]
    fn a_drone_quiet_for_the_interval_is_written_at_once() {
        let acked = Arc::new(Acked::default());
        let t0 = Instant::now();
        let mut spacing = Spacing::new(Duration::from_secs(30));
        assert!(matches!(
            spacing.offer(write(&acked, "d", 1), t0),
            Offer::Write(_)
        ));
        let later = t0 + Duration::from_secs(30);
        assert!(matches!(
            spacing.offer(write(&acked, "d", 2), later),
            Offer::Write(_)
        ));
    }
}

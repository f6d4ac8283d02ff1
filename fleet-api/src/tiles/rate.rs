//! How many tiles each caller ([`Who`]) may ask the API for: a token bucket per caller,
//! refilled at a steady rate and holding a burst, so that one caller cannot spend the tile
//! server's quota (Azure Maps bills per tile request) or the API's connections.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::caps::Who;

/// Buckets kept before full ones (which a new caller would get anyway) are forgotten.
const BUCKETS_KEPT: usize = 10_000;

/// One caller's tiles still to ask for, as of `last`.
#[derive(Debug)]
struct Bucket {
    tiles: f64,
    last: Instant,
}

/// The tile buckets of every caller.
#[derive(Debug)]
pub struct TileRate {
    per_sec: f64,
    burst: f64,
    buckets: Mutex<HashMap<Who, Bucket>>,
}

impl TileRate {
    /// `per_sec` tiles a second per caller, `burst` at once.
    pub fn new(per_sec: f64, burst: f64) -> Self {
        Self {
            per_sec,
            burst,
            buckets: Mutex::default(),
        }
    }

    /// Takes one tile of `who`'s bucket; when it is empty, how long until one is back.
    pub fn take(&self, who: &Who) -> Result<(), Duration> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= BUCKETS_KEPT {
            buckets.retain(|_, b| self.refilled(b, now) < self.burst);
        }
        let bucket = buckets.entry(who.clone()).or_insert(Bucket {
            tiles: self.burst,
            last: now,
        });
        bucket.tiles = self.refilled(bucket, now);
        bucket.last = now;
        if bucket.tiles >= 1.0 {
            bucket.tiles -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tiles) / self.per_sec))
        }
    }

    fn refilled(&self, bucket: &Bucket, now: Instant) -> f64 {
        let elapsed = now.duration_since(bucket.last).as_secs_f64();
        (bucket.tiles + elapsed * self.per_sec).min(self.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Identity;

    #[tokio::test(start_paused = true)]
    async fn a_caller_gets_its_burst_then_its_rate_and_others_their_own() {
        let rate = TileRate::new(10.0, 4.0);
        let a = Who::Caller(Identity::Key("a".into()));
        let b = Who::Client("192.0.2.7".parse().unwrap());
        for _ in 0..4 {
            rate.take(&a).unwrap();
        }
        let wait = rate.take(&a).unwrap_err();
        assert!(
            wait.abs_diff(Duration::from_millis(100)) < Duration::from_millis(1),
            "{wait:?}"
        );
        rate.take(&b).expect("another caller has its own bucket");
        tokio::time::advance(Duration::from_millis(100)).await;
        rate.take(&a)
            .expect("one tile back after 100 ms at 10 a second");
        assert!(rate.take(&a).is_err());
        tokio::time::advance(Duration::from_secs(60)).await;
        for _ in 0..4 {
            rate.take(&a).unwrap();
        }
        assert!(
            rate.take(&a).is_err(),
            "the bucket holds the burst, no more"
        );
    }
}

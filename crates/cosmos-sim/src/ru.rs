//! Request units: what each operation costs (the RU model) and the per-partition budget that
//! throttles when it is spent (a token bucket refilled continuously at the partition's share of
//! the provisioned RU/s, holding at most one second of it).
//!
//! The model, calibrated to the service's published figures (see the crate README):
//! - insert (create, or upsert of a new id): `5.1 + 0.6 × KB` (1 KB: 5.7 RU, 2 KB: 6.3 RU);
//! - overwrite (replace, upsert of an existing id, patch): `1.4 ×` the insert charge of the
//!   resulting document; delete: the insert charge of the deleted document;
//! - point read: `max(1, KB)`; a miss or a failed precondition: 1 RU per KB looked at, at least 1;
//! - query: `2.3 + 0.02 × documents scanned + 1.0 × KB returned`.

use std::time::{Duration, Instant};

const KB: f64 = 1024.0;

/// Charge of creating a document of `bytes` bytes.
pub fn insert(bytes: usize) -> f64 {
    round(5.1 + 0.6 * bytes as f64 / KB)
}

/// Charge of overwriting a document with one of `bytes` bytes (replace, upsert, patch).
pub fn overwrite(bytes: usize) -> f64 {
    round(1.4 * (5.1 + 0.6 * bytes as f64 / KB))
}

/// Charge of deleting a document of `bytes` bytes.
pub fn delete(bytes: usize) -> f64 {
    insert(bytes)
}

/// Charge of reading a document of `bytes` bytes (also of a miss, with `bytes` 0).
pub fn read(bytes: usize) -> f64 {
    round((bytes as f64 / KB).max(1.0))
}

/// Charge of one query page: a base, the documents examined and the bytes returned.
pub fn query(scanned: usize, returned_bytes: usize) -> f64 {
    round(2.3 + 0.02 * scanned as f64 + returned_bytes as f64 / KB)
}

/// Charge reported for metadata requests (account, databases, containers, ranges, query
/// plans); they do not draw on any partition's budget.
pub const METADATA: f64 = 1.0;

fn round(ru: f64) -> f64 {
    (ru * 100.0).round() / 100.0
}

/// A partition's RU budget: refilled at `rate` RU/s, holding at most one second of it.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket for `rate` RU/s (`f64::INFINITY`: never throttles).
    pub fn new(rate: f64) -> Self {
        Self {
            rate,
            tokens: rate,
            last: Instant::now(),
        }
    }

    /// The refill rate, RU/s.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Changes the refill rate, keeping what is in the bucket (capped at the new capacity).
    pub fn set_rate(&mut self, rate: f64) {
        self.refill(Instant::now());
        self.rate = rate;
        self.tokens = self.tokens.min(rate);
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
    }

    /// Takes `charge` RU if they are there, or answers how long until they are.
    ///
    /// A charge larger than a whole second of budget goes through when the bucket is full and
    /// leaves it in debt, so that no operation is refused forever.
    pub fn try_take(&mut self, charge: f64) -> Result<(), Duration> {
        if self.rate.is_infinite() {
            return Ok(());
        }
        self.refill(Instant::now());
        if self.tokens >= charge || self.tokens >= self.rate {
            self.tokens -= charge;
            return Ok(());
        }
        let missing = charge.min(self.rate) - self.tokens;
        let wait = if self.rate > 0.0 {
            missing / self.rate
        } else {
            1.0
        };
        Err(Duration::from_secs_f64(wait.max(0.001)))
    }
}

/// Milliseconds to put in `x-ms-retry-after-ms`, at least 1.
pub fn retry_after_ms(wait: Duration) -> u64 {
    (wait.as_millis() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibrated_to_published_figures() {
        assert_eq!(insert(1024), 5.7);
        assert_eq!(insert(2048), 6.3);
        assert!(overwrite(1024) > insert(1024) * 1.3);
        assert_eq!(read(100), 1.0);
        assert_eq!(read(4096), 4.0);
        assert!(query(0, 0) > 2.0);
        assert!(query(1000, 0) > query(10, 0));
    }

    #[test]
    fn bucket_throttles_when_spent_and_says_how_long() {
        let mut bucket = Bucket::new(100.0);
        assert!(bucket.try_take(60.0).is_ok());
        let wait = bucket.try_take(60.0).unwrap_err();
        // 20 RU missing at 100 RU/s: about 200 ms.
        assert!(
            wait > Duration::from_millis(150) && wait <= Duration::from_millis(200),
            "{wait:?}"
        );
        assert!(bucket.try_take(40.0).is_ok());
    }

    #[test]
    fn oversized_charge_passes_on_a_full_bucket_only() {
        let mut bucket = Bucket::new(10.0);
        assert!(bucket.try_take(25.0).is_ok());
        assert!(bucket.try_take(1.0).is_err());
        let mut unlimited = Bucket::new(f64::INFINITY);
        assert!(unlimited.try_take(1e9).is_ok());
    }
}

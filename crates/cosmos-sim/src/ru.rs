//! Request units: what each operation costs (the RU model) and the per-partition budget that
//! throttles when it is spent (a token bucket refilled continuously at the partition's share of
//! the provisioned RU/s, holding at most one second of it), low-priority requests first.
//!
//! Writes are charged as Microsoft publishes it ([`cosmos_wire::charges`]: a size-based
//! charge and the indexed terms the container's policy makes the write add or remove).
//! Reads and queries:
//! - point read: `max(1, KB)` ("Optimize request cost": 1 KB 1 RU, 100 KB 10 RUs; the 2026
//!   size table charges larger documents less, after binary encoding); a miss or a failed
//!   precondition: 1 RU per KB looked at, at least 1;
//! - query: `2.3 + 0.02 × documents scanned + 1.0 × KB returned` ("if a query returns 1000
//!   1-KB items, the cost of the operation is 1000"; the base and the scan are not published).

pub use cosmos_wire::charges::{TermChanges, create, delete, patch, replace};
use cosmos_wire::priority::Priority;
use std::time::{Duration, Instant};

const KB: f64 = 1024.0;

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

/// The share of a full bucket that low-priority requests may not draw on: half a second of the
/// partition's budget, kept for high-priority requests.
///
/// This is how the endpoint implements priority-based execution as the service documents it:
/// when requests ask for more than the budget, low-priority ones are throttled first. A
/// low-priority request is served only while the bucket holds more than the reserve after its
/// charge; a high-priority one may draw the bucket dry. Under a steady low-priority load the
/// bucket therefore hovers at the reserve, and every high-priority request finds the reserve
/// there; whatever it takes is refilled before low priority may draw again.
///
/// The reserve is not a reservation of RU/s, which the service says it does not make: the bucket
/// still refills at the full rate, so low-priority requests alone get all of the provisioned
/// throughput over time; they lose only the burst above it (half a second of budget instead of
/// a whole one). Half a second holds the bursts of the bulk writer (a batch per range every
/// 100 ms, tens to hundreds of RU) many times over while leaving low priority half a second of
/// burst of its own.
pub const HIGH_PRIORITY_RESERVE: f64 = 0.5;

/// A partition's RU budget: refilled at `rate` RU/s, holding at most one second of it, of
/// which [`HIGH_PRIORITY_RESERVE`] only high-priority requests may draw.
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

    /// Takes `charge` RU for a request of `priority` if they are there, or answers how long
    /// until they are. A low-priority request must leave the [`HIGH_PRIORITY_RESERVE`] in the
    /// bucket; a high-priority one may empty it.
    ///
    /// A charge larger than what the priority may draw goes through when the bucket is full and
    /// leaves it in debt, so that no operation is refused forever.
    pub fn try_take(&mut self, charge: f64, priority: Priority) -> Result<(), Duration> {
        self.try_take_at(charge, priority, Instant::now())
    }

    /// Whether a request of `priority` may start: `Ok` while the bucket holds more than the
    /// priority must leave in it, else how long until it does. Its charge is taken afterwards
    /// ([`Bucket::try_take`]); this spares the work of a request that could not be served.
    pub fn admits(&mut self, priority: Priority) -> Result<(), Duration> {
        self.admits_at(priority, Instant::now())
    }

    fn admits_at(&mut self, priority: Priority, now: Instant) -> Result<(), Duration> {
        if self.rate.is_infinite() {
            return Ok(());
        }
        self.refill(now);
        let floor = self.floor(priority);
        if self.tokens > floor {
            return Ok(());
        }
        let missing = floor - self.tokens;
        let wait = if self.rate > 0.0 {
            missing / self.rate
        } else {
            1.0
        };
        Err(Duration::from_secs_f64(wait.max(0.001)))
    }

    /// What a request of `priority` must leave in the bucket.
    fn floor(&self, priority: Priority) -> f64 {
        match priority {
            Priority::High => 0.0,
            Priority::Low => HIGH_PRIORITY_RESERVE * self.rate,
        }
    }

    fn try_take_at(
        &mut self,
        charge: f64,
        priority: Priority,
        now: Instant,
    ) -> Result<(), Duration> {
        if self.rate.is_infinite() {
            return Ok(());
        }
        self.refill(now);
        let needed = (charge + self.floor(priority)).min(self.rate);
        if self.tokens >= needed {
            self.tokens -= charge;
            return Ok(());
        }
        let missing = needed - self.tokens;
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
    fn reads_and_queries() {
        assert_eq!(read(100), 1.0);
        assert_eq!(read(4096), 4.0);
        assert!(query(0, 0) > 2.0);
        assert!(query(1000, 0) > query(10, 0));
    }

    const HIGH: Priority = Priority::High;
    const LOW: Priority = Priority::Low;

    #[test]
    fn bucket_throttles_when_spent_and_says_how_long() {
        let mut bucket = Bucket::new(100.0);
        assert!(bucket.try_take(60.0, HIGH).is_ok());
        let wait = bucket.try_take(60.0, HIGH).unwrap_err();
        // 20 RU missing at 100 RU/s: about 200 ms.
        assert!(
            wait > Duration::from_millis(150) && wait <= Duration::from_millis(200),
            "{wait:?}"
        );
        assert!(bucket.try_take(40.0, HIGH).is_ok());
    }

    #[test]
    fn oversized_charge_passes_on_a_full_bucket_only() {
        let mut bucket = Bucket::new(10.0);
        assert!(bucket.try_take(25.0, HIGH).is_ok());
        assert!(bucket.try_take(1.0, HIGH).is_err());
        let mut low = Bucket::new(10.0);
        assert!(low.try_take(8.0, LOW).is_ok(), "a full bucket serves it");
        let mut unlimited = Bucket::new(f64::INFINITY);
        assert!(unlimited.try_take(1e9, LOW).is_ok());
    }

    #[test]
    fn low_priority_leaves_the_reserve_to_high_priority() {
        let start = Instant::now();
        let mut bucket = Bucket::new(100.0);
        bucket.last = start;
        // Low priority draws down to the reserve (50 of 100), not below.
        assert!(bucket.try_take_at(30.0, LOW, start).is_ok());
        assert!(bucket.try_take_at(20.0, LOW, start).is_ok());
        let wait = bucket.try_take_at(1.0, LOW, start).unwrap_err();
        assert_eq!(
            wait,
            Duration::from_millis(10),
            "1 RU above the reserve at 100 RU/s"
        );
        // High priority still finds the reserve, all of it.
        assert!(bucket.try_take_at(50.0, HIGH, start).is_ok());
        assert!(bucket.try_take_at(1.0, HIGH, start).is_err());
        // What refills goes to the reserve first: low waits until it is whole again.
        let later = start + Duration::from_millis(400);
        assert!(bucket.try_take_at(1.0, LOW, later).is_err());
        assert!(bucket.try_take_at(1.0, HIGH, later).is_ok());
    }

    #[test]
    fn a_request_starts_only_while_its_priority_may_draw() {
        let start = Instant::now();
        let mut bucket = Bucket::new(100.0);
        bucket.last = start;
        assert!(bucket.try_take_at(50.0, LOW, start).is_ok());
        // At the reserve: low priority may not start, high may.
        assert_eq!(bucket.admits_at(LOW, start), Err(Duration::from_millis(1)));
        assert!(bucket.admits_at(HIGH, start).is_ok());
        assert!(bucket.try_take_at(50.0, HIGH, start).is_ok());
        assert!(bucket.admits_at(HIGH, start).is_err());
        let later = start + Duration::from_millis(501);
        assert!(bucket.admits_at(LOW, later).is_ok());
    }

    #[test]
    fn low_priority_alone_gets_the_whole_rate_over_time() {
        let start = Instant::now();
        let mut bucket = Bucket::new(100.0);
        bucket.last = start;
        let mut served = 0.0;
        for ms in 0..10_000u64 {
            if bucket
                .try_take_at(5.0, LOW, start + Duration::from_millis(ms))
                .is_ok()
            {
                served += 5.0;
            }
        }
        // 10 s at 100 RU/s plus what was above the reserve at the start.
        assert!((1000.0..=1055.0).contains(&served), "{served}");
    }

    #[test]
    fn high_priority_is_served_at_its_rate_under_a_low_priority_storm() {
        let start = Instant::now();
        let mut bucket = Bucket::new(100.0);
        bucket.last = start;
        let (mut high_refused, mut low_served) = (0, 0.0);
        for ms in 0..10_000u64 {
            let now = start + Duration::from_millis(ms);
            // High priority: 6 RU every 100 ms (60 % of the rate); low: as much as it can.
            if ms % 100 == 0 && bucket.try_take_at(6.0, HIGH, now).is_err() {
                high_refused += 1;
            }
            if bucket.try_take_at(2.0, LOW, now).is_ok() {
                low_served += 2.0;
            }
        }
        assert_eq!(high_refused, 0);
        // Low priority gets what high priority leaves: about 40 RU/s.
        assert!((400.0..=470.0).contains(&low_served), "{low_served}");
    }
}

//! The concurrency controller of one partition key range: additive increase, multiplicative
//! decrease (AIMD), the way TCP shares a link.
//!
//! - Slow start: until the range is first throttled, every batch that completes without
//!   throttling raises the limit by one, which doubles it per round trip; a range that is
//!   never throttled reaches its cap after a handful of round trips.
//! - Increase: after that, a window of `limit` batches completed without throttling (about
//!   one round trip at the current concurrency) raises the limit by one, up to the cap.
//! - Decrease: a throttled batch (or one that failed transiently: timeout, 503, 449 — signs
//!   of an overloaded server too) halves the limit (never below one). Only one decrease per
//!   window: batches are stamped with the controller's generation when they leave, and a
//!   throttle from a batch that left before the last decrease does not count again — a burst
//!   of throttles from one overloaded moment halves the limit once, not down to one.

/// AIMD state of one range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Aimd {
    limit: usize,
    max: usize,
    generation: u64,
    /// Unthrottled completions of the current generation since the last increase.
    clean: usize,
    /// Whether the range has never been throttled: the limit grows per completion.
    slow_start: bool,
}

impl Aimd {
    /// A controller starting at `initial` (at least one) and capped at `max`.
    pub fn new(initial: usize, max: usize) -> Self {
        let max = max.max(1);
        Self {
            limit: initial.clamp(1, max),
            max,
            generation: 0,
            clean: 0,
            slow_start: true,
        }
    }

    /// How many batches may be in flight.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The stamp for a batch that leaves now.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A batch sent in generation `sent` completed without throttling.
    pub fn on_success(&mut self, sent: u64) {
        if sent != self.generation {
            return;
        }
        self.clean += 1;
        if self.slow_start || self.clean >= self.limit {
            self.clean = 0;
            self.limit = (self.limit + 1).min(self.max);
        }
    }

    /// A batch sent in generation `sent` was throttled. Returns whether the limit dropped.
    pub fn on_throttle(&mut self, sent: u64) -> bool {
        if sent != self.generation {
            return false;
        }
        self.limit = (self.limit / 2).max(1);
        self.slow_start = false;
        self.generation += 1;
        self.clean = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_per_round_trip_until_the_first_throttle() {
        let mut c = Aimd::new(1, 64);
        // One round trip: every batch in flight completes cleanly.
        for expected in [2, 4, 8, 16, 32, 64, 64] {
            for _ in 0..c.limit() {
                c.on_success(c.generation());
            }
            assert_eq!(c.limit(), expected);
        }
        c.on_throttle(c.generation());
        assert_eq!(c.limit(), 32);
        for _ in 0..32 {
            c.on_success(c.generation());
        }
        assert_eq!(c.limit(), 33, "additive after a throttle");
    }

    #[test]
    fn grows_by_one_per_clean_window_up_to_the_cap() {
        let mut c = Aimd::new(2, 4);
        c.on_throttle(0);
        let g = c.generation();
        assert_eq!(c.limit(), 1);
        c.on_success(g);
        assert_eq!(c.limit(), 2);
        c.on_success(g);
        assert_eq!(c.limit(), 2, "a window of 2 needs 2 clean batches");
        c.on_success(g);
        assert_eq!(c.limit(), 3);
        for _ in 0..3 {
            c.on_success(g);
        }
        assert_eq!(c.limit(), 4);
        for _ in 0..20 {
            c.on_success(g);
        }
        assert_eq!(c.limit(), 4, "capped");
    }

    #[test]
    fn throttle_halves_once_per_generation() {
        let mut c = Aimd::new(16, 20);
        let sent = c.generation();
        assert!(c.on_throttle(sent));
        assert_eq!(c.limit(), 8);
        // Other batches of the same overloaded moment do not halve again.
        assert!(!c.on_throttle(sent));
        assert!(!c.on_throttle(sent));
        assert_eq!(c.limit(), 8);
        // A batch sent after the decrease does.
        assert!(c.on_throttle(c.generation()));
        assert_eq!(c.limit(), 4);
        for _ in 0..5 {
            let g = c.generation();
            c.on_throttle(g);
        }
        assert_eq!(c.limit(), 1, "never below one");
    }

    #[test]
    fn stale_successes_do_not_grow_the_limit() {
        let mut c = Aimd::new(2, 20);
        let old = c.generation();
        c.on_throttle(old);
        assert_eq!(c.limit(), 1);
        for _ in 0..10 {
            c.on_success(old);
        }
        assert_eq!(c.limit(), 1);
        c.on_success(c.generation());
        assert_eq!(c.limit(), 2);
    }

    #[test]
    fn initial_is_clamped() {
        assert_eq!(Aimd::new(0, 20).limit(), 1);
        assert_eq!(Aimd::new(50, 20).limit(), 20);
        assert_eq!(Aimd::new(3, 0).limit(), 1);
    }
}

//! Exponential backoff with full jitter, shared by the transport (reconnects) and the
//! position sources (restarts).
//!
//! The n-th delay after a failure (n from 0) is drawn uniformly from
//! `[0, min(cap, base * 2^n)]` ("full jitter"): a fleet that loses its broker at the same
//! moment spreads its reconnects over the whole window instead of coming back in
//! lock-step, and the window doubles while the broker stays away.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The shape of a backoff schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// The upper bound of the first delay.
    pub base: Duration,
    /// The largest upper bound any delay can have.
    pub cap: Duration,
}

impl Default for BackoffConfig {
    /// 1 s base, 60 s cap.
    fn default() -> Self {
        BackoffConfig {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        }
    }
}

/// A backoff schedule in progress: [`Backoff::next_delay`] after each failure,
/// [`Backoff::reset`] after a success.
#[derive(Debug)]
pub struct Backoff {
    config: BackoffConfig,
    failures: u32,
    rng: StdRng,
}

impl Backoff {
    /// A schedule seeded from the operating system's randomness.
    pub fn new(config: BackoffConfig) -> Backoff {
        Backoff::with_rng(config, StdRng::from_os_rng())
    }

    /// A deterministic schedule, for tests.
    pub fn seeded(config: BackoffConfig, seed: u64) -> Backoff {
        Backoff::with_rng(config, StdRng::seed_from_u64(seed))
    }

    fn with_rng(config: BackoffConfig, rng: StdRng) -> Backoff {
        Backoff {
            config,
            failures: 0,
            rng,
        }
    }

    /// The upper bound of the next delay: `min(cap, base * 2^failures)`.
    pub fn window(&self) -> Duration {
        let factor = 1u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        self.config
            .base
            .checked_mul(factor)
            .map_or(self.config.cap, |window| window.min(self.config.cap))
    }

    /// The delay before the next attempt, uniform in `[0, window]`; widens the window
    /// for the attempt after.
    pub fn next_delay(&mut self) -> Duration {
        let window = self.window();
        self.failures = self.failures.saturating_add(1);
        let nanos = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.rng.random_range(0..=nanos))
    }

    /// Failures since the last [`Backoff::reset`].
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Back to the first window after a success.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: BackoffConfig = BackoffConfig {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(2),
    };

    #[test]
    fn window_doubles_up_to_the_cap() {
        let mut backoff = Backoff::seeded(CONFIG, 1);
        let mut windows = Vec::new();
        for _ in 0..8 {
            windows.push(backoff.window().as_millis());
            backoff.next_delay();
        }
        assert_eq!(windows, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        backoff.reset();
        assert_eq!(backoff.window(), CONFIG.base);
    }

    #[test]
    fn delays_stay_in_the_window_and_spread_over_it() {
        let mut delays = Vec::new();
        for seed in 0..200 {
            let mut backoff = Backoff::seeded(CONFIG, seed);
            let delay = backoff.next_delay();
            assert!(delay <= CONFIG.base);
            delays.push(delay);
        }
        let low = delays.iter().filter(|d| **d < CONFIG.base / 2).count();
        // Uniform over the window: about half fall in the lower half.
        assert!((60..=140).contains(&low), "{low} of 200 in the lower half");
    }

    #[test]
    fn huge_failure_counts_do_not_overflow() {
        let mut backoff = Backoff::seeded(CONFIG, 7);
        for _ in 0..100 {
            assert!(backoff.next_delay() <= CONFIG.cap);
        }
        assert_eq!(backoff.window(), CONFIG.cap);
    }
}

//! Exponential backoff with jitter, and a server's retry-after: one implementation for every
//! reconnect and retry of the project (the agent's link and its sources, the writer's
//! sources, its hold's probes and its metrics server's accept loop, the Cosmos client's
//! retry policy).
//!
//! The window after `n` failures (n from 0) is `min(cap, base * 2^n)`. With full jitter (the
//! default, [`Jitter::Full`]) a delay is drawn uniformly from `[0, window]`: a fleet that
//! loses its broker at the same moment spreads its reconnects over the whole window instead of
//! coming back in lock-step, and the window doubles while the broker stays away. With
//! [`Jitter::Equal`] the delay is drawn from the upper half, `[window / 2, window]`, which
//! keeps a floor under every wait. A server that says when to come back
//! ([`BackoffConfig::delay`] with a retry-after) is waited for, up to the cap.
//!
//! Why not a crate: the kept crates draw their jitter on top of the delay (`backon`: a random
//! `(0, delay)` added to it) or around it (`exponential-backoff`, `backoff`: a factor of
//! `1 ± jitter`), none draws from `[0, window]`, and none takes a server's retry-after
//! without wrapping the operation in its own retry loop, which the bulk writer's
//! per-operation budgets and the agent's link loop do not fit. This crate is the window
//! arithmetic and one random draw.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How a delay is drawn from its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Uniform in `[0, window]`.
    #[default]
    Full,
    /// Uniform in `[window / 2, window]`.
    Equal,
}

/// The shape of a backoff schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// The upper bound of the first delay.
    pub base: Duration,
    /// The largest upper bound any delay can have, and the longest retry-after waited for.
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

impl BackoffConfig {
    /// The window after `failures` failures: `min(cap, base * 2^failures)`.
    pub fn window(&self, failures: u32) -> Duration {
        let factor = 1u32.checked_shl(failures.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .map_or(self.cap, |window| window.min(self.cap))
    }

    /// The wait after `failures` earlier failures: the server's `retry_after` when it gave
    /// one (at most the cap), else a draw from the window.
    pub fn delay(
        &self,
        failures: u32,
        retry_after: Option<Duration>,
        jitter: Jitter,
        rng: &mut impl Rng,
    ) -> Duration {
        match retry_after {
            Some(wait) => wait.min(self.cap),
            None => jitter.draw(self.window(failures), rng),
        }
    }
}

impl Jitter {
    /// A delay drawn from `window`.
    pub fn draw(self, window: Duration, rng: &mut impl Rng) -> Duration {
        match self {
            Jitter::Full => {
                let nanos = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
                Duration::from_nanos(rng.random_range(0..=nanos))
            }
            Jitter::Equal => {
                let half = window / 2;
                half + half.mul_f64(rng.random::<f64>())
            }
        }
    }
}

/// A backoff schedule in progress, with full jitter: [`Backoff::next_delay`] after each
/// failure, [`Backoff::reset`] after a success.
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
    #[cfg(test)]
    fn seeded(config: BackoffConfig, seed: u64) -> Backoff {
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
        self.config.window(self.failures)
    }

    /// The delay before the next attempt, uniform in `[0, window]`; widens the window
    /// for the attempt after.
    pub fn next_delay(&mut self) -> Duration {
        let delay = Jitter::Full.draw(self.window(), &mut self.rng);
        self.failures = self.failures.saturating_add(1);
        delay
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

    #[test]
    fn equal_jitter_keeps_to_the_upper_half() {
        let mut rng = StdRng::seed_from_u64(3);
        for failures in 0..12 {
            let window = CONFIG.window(failures);
            for _ in 0..50 {
                let d = CONFIG.delay(failures, None, Jitter::Equal, &mut rng);
                assert!(
                    d >= window / 2 && d <= window,
                    "{failures}: {d:?} vs {window:?}"
                );
            }
        }
    }

    #[test]
    fn retry_after_is_waited_for_up_to_the_cap() {
        let mut rng = StdRng::seed_from_u64(5);
        let ms = Duration::from_millis;
        for jitter in [Jitter::Full, Jitter::Equal] {
            assert_eq!(CONFIG.delay(0, Some(ms(120)), jitter, &mut rng), ms(120));
            assert_eq!(CONFIG.delay(9, Some(ms(120)), jitter, &mut rng), ms(120));
            assert_eq!(
                CONFIG.delay(0, Some(Duration::from_secs(600)), jitter, &mut rng),
                CONFIG.cap
            );
        }
    }
}

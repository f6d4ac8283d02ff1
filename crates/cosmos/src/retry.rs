//! The retry policy: which failures are worth another attempt, how long to wait before it,
//! and the budget (attempts and total time) after which an operation's failure is final.
//!
//! Throttling (429) waits for the server's `x-ms-retry-after-ms`; other transient failures
//! (449, 408, 503, 410 without a range move, timeouts, broken connections) back off
//! exponentially with jitter; a range move (410 with substatus 1002, 1007 or 1008) is retried
//! after the range map is refreshed.
//!
//! The budget: throttled attempts are bounded by time alone (`max_retry_time`), because under
//! a tight RU budget an operation may legitimately be throttled many times before its turn;
//! every other failure also counts against `max_attempts`.

use std::time::Duration;

use cosmos_wire::status::Disposition;
use retry_backoff::{BackoffConfig, Jitter};

/// Retry budget and backoff of point operations and of each bulk operation.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts per operation that may fail other than by throttling (at least 1).
    pub max_attempts: u32,
    /// Time after the first attempt past which no new attempt starts.
    pub max_retry_time: Duration,
    /// Backoff after the first transient failure; doubles with each further one.
    pub base_backoff: Duration,
    /// Largest backoff, and largest wait for a server's retry-after.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            max_retry_time: Duration::from_secs(60),
            base_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// Whether an operation may try again after a failure of kind `disposition`, having
    /// failed `failures` times other than by throttling (this failure included), its first
    /// attempt `elapsed` ago.
    pub(crate) fn allows_retry(
        &self,
        disposition: Disposition,
        failures: u32,
        elapsed: Duration,
    ) -> bool {
        is_retryable(disposition)
            && elapsed < self.max_retry_time
            && (disposition == Disposition::Throttled || failures < self.max_attempts)
    }

    /// How long to wait after the `failures`-th consecutive failure (1 for the first): the
    /// server's retry-after when it gave one (at most `max_backoff`), else exponential backoff
    /// with equal jitter: a random point in the upper half of the window, so that clients do
    /// not retry in lock-step and an operation never comes back at once.
    pub(crate) fn delay(&self, failures: u32, retry_after: Option<Duration>) -> Duration {
        let schedule = BackoffConfig {
            base: self.base_backoff,
            cap: self.max_backoff,
        };
        schedule.delay(
            failures.saturating_sub(1),
            retry_after,
            Jitter::Equal,
            &mut rand::rng(),
        )
    }
}

/// Whether a failure of this kind is retried at all (budget permitting).
fn is_retryable(disposition: Disposition) -> bool {
    matches!(
        disposition,
        Disposition::Throttled | Disposition::RangeGone | Disposition::Transient
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosmos_wire::status::disposition;

    #[test]
    fn classifies_bulk_failures() {
        for (status, sub) in [
            (429, 3200),
            (410, 1002),
            (410, 1007),
            (449, 0),
            (408, 0),
            (503, 0),
        ] {
            assert!(is_retryable(disposition(status, sub)), "{status}/{sub}");
        }
        for (status, sub) in [
            (200, 0),
            (201, 0),
            (400, 0),
            (404, 0),
            (409, 0),
            (412, 0),
            (413, 0),
        ] {
            assert!(!is_retryable(disposition(status, sub)), "{status}/{sub}");
        }
    }

    #[test]
    fn honours_retry_after_within_the_cap() {
        let policy = RetryPolicy::default();
        let ms = Duration::from_millis;
        assert_eq!(policy.delay(1, Some(ms(120))), ms(120));
        assert_eq!(policy.delay(7, Some(ms(120))), ms(120));
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(600))),
            policy.max_backoff
        );
    }

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let policy = RetryPolicy::default();
        for failures in 1..=12 {
            let window = policy
                .base_backoff
                .saturating_mul(1 << (failures - 1))
                .min(policy.max_backoff);
            for _ in 0..50 {
                let d = policy.delay(failures, None);
                assert!(
                    d >= window / 2 && d <= window,
                    "{failures}: {d:?} vs {window:?}"
                );
            }
        }
    }

    #[test]
    fn budget_counts_failures_and_time_but_throttles_only_by_time() {
        let policy = RetryPolicy {
            max_attempts: 3,
            max_retry_time: Duration::from_secs(1),
            ..RetryPolicy::default()
        };
        let (zero, late) = (Duration::ZERO, Duration::from_secs(1));
        let transient = Disposition::Transient;
        assert!(policy.allows_retry(transient, 1, zero));
        assert!(policy.allows_retry(transient, 2, Duration::from_millis(999)));
        assert!(!policy.allows_retry(transient, 3, zero));
        assert!(!policy.allows_retry(transient, 1, late));
        assert!(policy.allows_retry(Disposition::RangeGone, 2, zero));
        assert!(!policy.allows_retry(Disposition::RangeGone, 3, zero));
        // Throttling does not use up attempts, only time.
        assert!(policy.allows_retry(Disposition::Throttled, 50, zero));
        assert!(!policy.allows_retry(Disposition::Throttled, 0, late));
        // Final answers are never retried.
        assert!(!policy.allows_retry(Disposition::Permanent, 0, zero));
        assert!(!policy.allows_retry(Disposition::Success, 0, zero));
    }
}

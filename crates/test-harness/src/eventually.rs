//! Waiting for a condition on a real peer: [`eventually`] for async tests and
//! [`eventually_blocking`] for plain ones. Both poll every [`POLL`] and panic after their
//! limit, naming what they waited for and the last value they saw.
//!
//! [`eventually`] runs on tokio's clock: on paused time each poll advances the clock, so
//! there it suits in-process state only; a real peer (a process, a socket) needs the
//! wall clock, that is a test not on paused time.

use std::fmt::Debug;
use std::time::Duration;

/// How often the condition is asked again.
pub const POLL: Duration = Duration::from_millis(20);

/// Polls `probe` until `done` holds for its value and returns that value; panics with
/// `what` and the last value when `limit` passes first.
pub async fn eventually<T: Debug>(
    what: &str,
    limit: Duration,
    mut probe: impl AsyncFnMut() -> T,
    mut done: impl FnMut(&T) -> bool,
) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let value = probe().await;
        if done(&value) {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}; last {value:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for a test without a runtime: blocks the thread between polls.
pub fn eventually_blocking<T: Debug>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> T,
    mut done: impl FnMut(&T) -> bool,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let value = probe();
        if done(&value) {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {limit:?}; last {value:?}"
        );
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn returns_the_first_value_that_holds() {
        let mut n = 0;
        let got = eventually(
            "n to reach 3",
            Duration::from_secs(1),
            async || {
                n += 1;
                n
            },
            |n| *n == 3,
        )
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "never: not within 1s; last false")]
    async fn panics_with_the_last_value_after_the_limit() {
        eventually("never", Duration::from_secs(1), async || false, |v| *v).await;
    }

    #[test]
    fn blocking_returns_the_first_value_that_holds() {
        let mut n = 0;
        let got = eventually_blocking(
            "n to reach 2",
            Duration::from_secs(10),
            || {
                n += 1;
                n
            },
            |n| *n == 2,
        );
        assert_eq!(got, 2);
    }
}

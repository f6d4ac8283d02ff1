//! The sources' reconnect backoff: exponential with full jitter, 100 ms doubling to 10 s,
//! reset once a connection works again. The MQTT source waits it between connection
//! attempts, the Event Hubs source between rebuilds of its processor.

use std::time::Duration;

/// Exponential reconnect backoff with full jitter, 100 ms to 10 s.
#[derive(Debug, Default)]
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    /// The wait before the next attempt: half to all of 100 ms doubled per attempt so
    /// far, at most 10 s.
    pub fn next_delay(&mut self) -> Duration {
        let cap = 100u64.saturating_mul(1 << self.attempt.min(7)).min(10_000);
        self.attempt += 1;
        Duration::from_millis(rand::random_range(cap / 2..=cap))
    }

    /// The connection works: the next wait starts from 100 ms again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut backoff = Backoff::default();
        let first = backoff.next_delay();
        assert!(first <= Duration::from_millis(100));
        for _ in 0..20 {
            assert!(backoff.next_delay() <= Duration::from_secs(10));
        }
        assert!(backoff.next_delay() >= Duration::from_secs(5));
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(100));
    }
}

//! The writer's staleness rule and where it is applied. The rule is
//! [`telemetry::StalenessPolicy`]'s; every judgement of the writer goes through [`judge`]:
//! once when a message's batch is prepared (a stale message is dropped as `stale`, one
//! from the future as `from_future`), and again, by [`still_fresh`], whenever a position
//! already taken is about to be written later than that (its batch waited at the hold, it
//! is retried, or it was parked): one that turned stale meanwhile is dropped as
//! `stale_in_retry`.

use chrono::{DateTime, Utc};
use telemetry::{Freshness, StalenessPolicy};

/// Judges a position with `device_time`, enqueued by the hub at `enqueued` when the
/// source knows it, at `now`.
pub fn judge(
    policy: &StalenessPolicy,
    now: DateTime<Utc>,
    device_time: DateTime<Utc>,
    enqueued: Option<DateTime<Utc>>,
) -> Freshness {
    policy.judge(now, device_time, enqueued)
}

/// Whether a position taken earlier is still fresh now.
pub fn still_fresh(
    policy: &StalenessPolicy,
    device_time: DateTime<Utc>,
    enqueued: Option<DateTime<Utc>>,
) -> bool {
    judge(policy, Utc::now(), device_time, enqueued).is_fresh()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_position_taken_fresh_turns_stale_past_stale_after() {
        let policy = StalenessPolicy::default();
        let now = Utc::now();
        let seconds = |s: i64| chrono::TimeDelta::seconds(s);
        assert!(still_fresh(&policy, now - seconds(10), None));
        assert!(!still_fresh(&policy, now - seconds(301), None));
        // The hub's enqueued time, when known, decides.
        assert!(!still_fresh(&policy, now, Some(now - seconds(301))));
        assert_eq!(
            judge(&policy, now, now - seconds(2), None),
            Freshness::Fresh {
                lateness: Duration::from_secs(2)
            }
        );
    }
}

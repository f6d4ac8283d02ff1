//! The staleness rule.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use telemetry::staleness::{Freshness, StalenessPolicy};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T09:20:00Z")
        .unwrap()
        .to_utc()
}

fn secs(s: i64) -> TimeDelta {
    TimeDelta::seconds(s)
}

#[test]
fn defaults_are_five_and_two_minutes() {
    let policy = StalenessPolicy::default();
    assert_eq!(policy.stale_after, Duration::from_secs(300));
    assert_eq!(policy.future_tolerance, Duration::from_secs(120));
}

#[test]
fn cutoff_is_exclusive() {
    let policy = StalenessPolicy::default();
    assert_eq!(
        policy.judge(now(), now() - secs(300), None),
        Freshness::Fresh {
            lateness: Duration::from_secs(300)
        }
    );
    let verdict = policy.judge(now(), now() - secs(300) - TimeDelta::milliseconds(1), None);
    assert_eq!(
        verdict,
        Freshness::Stale {
            lateness: Duration::from_millis(300_001)
        }
    );
    assert!(!verdict.is_fresh());
}

#[test]
fn enqueued_time_is_the_reference_when_known() {
    let policy = StalenessPolicy::default();
    // The device clock says old, the hub says recent: fresh.
    assert_eq!(
        policy.judge(now(), now() - secs(3600), Some(now() - secs(10))),
        Freshness::Fresh {
            lateness: Duration::from_secs(10)
        }
    );
    // The device clock says recent, the hub says old: stale.
    assert_eq!(
        policy.judge(now(), now() - secs(1), Some(now() - secs(301))),
        Freshness::Stale {
            lateness: Duration::from_secs(301)
        }
    );
}

#[test]
fn device_times_ahead_beyond_tolerance_are_flagged() {
    let policy = StalenessPolicy::default();
    assert_eq!(
        policy.judge(now(), now() + secs(120), None),
        Freshness::Fresh {
            lateness: Duration::ZERO
        }
    );
    let verdict = policy.judge(now(), now() + secs(121), Some(now() - secs(1)));
    assert_eq!(
        verdict,
        Freshness::FromFuture {
            ahead: Duration::from_secs(121)
        }
    );
    assert_eq!(verdict.lateness(), Duration::ZERO);
}

#[test]
fn settings_are_honoured() {
    let policy = StalenessPolicy {
        stale_after: Duration::from_secs(10),
        future_tolerance: Duration::ZERO,
    };
    assert!(policy.judge(now(), now() - secs(10), None).is_fresh());
    assert!(!policy.judge(now(), now() - secs(11), None).is_fresh());
    assert_eq!(
        policy.judge(now(), now() + TimeDelta::milliseconds(1), None),
        Freshness::FromFuture {
            ahead: Duration::from_millis(1)
        }
    );
}

#[test]
fn lateness_is_reported_for_metrics() {
    let policy = StalenessPolicy::default();
    let verdict = policy.judge(now(), now() - secs(42), None);
    assert_eq!(verdict.lateness(), Duration::from_secs(42));
    assert!(verdict.is_fresh());
    // An enqueued time slightly ahead of now (clock skew between hosts) counts as zero.
    assert_eq!(
        policy
            .judge(now(), now() - secs(5), Some(now() + secs(1)))
            .lateness(),
        Duration::ZERO
    );
}

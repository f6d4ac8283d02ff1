//! Judging one message: decode (one position or a batch), identity check, staleness of
//! each position. Pure; no I/O.
//!
//! It also holds the writer's staleness rule and where it is applied. The rule is
//! [`telemetry::StalenessPolicy`]'s; every judgement of the writer goes through
//! [`freshness`]: once when a message's batch is prepared (a stale message is dropped as
//! `stale`, one from the future as `from_future`), and again, by [`still_fresh`], whenever
//! a position already taken is about to be written later than that (its batch waited at
//! the hold, it is retried, or it was parked): one that turned stale meanwhile is dropped
//! as `stale_in_retry`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use telemetry::wire::{self, Decoded, Invalid, Position};
use telemetry::{Freshness, StalenessPolicy};

use crate::metrics::DropReason;

/// Why a message is not written.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// The payload, or one position of a batch, is not a valid position.
    Invalid(Invalid),
    /// The payload's `deviceId` differs from the identity the transport authenticated.
    Spoofed {
        /// The `deviceId` the payload claims.
        claimed: String,
    },
    /// Older than the staleness cutoff.
    Stale {
        /// How late it is.
        lateness: Duration,
    },
    /// Its device time lies too far ahead of now.
    FromFuture {
        /// How far ahead.
        ahead: Duration,
    },
    /// An event IoT Hub routed that the writer does not store (another message source,
    /// a module's event).
    Unsupported(String),
    /// A connection state or twin change event that does not follow the documented schema.
    BadEvent(String),
}

impl Rejection {
    /// The drop reason.
    pub fn reason(&self) -> DropReason {
        match self {
            Rejection::Invalid(_) => DropReason::Invalid,
            Rejection::Spoofed { .. } => DropReason::Spoofed,
            Rejection::Stale { .. } => DropReason::Stale,
            Rejection::FromFuture { .. } => DropReason::FromFuture,
            Rejection::Unsupported(_) => DropReason::UnsupportedEvent,
            Rejection::BadEvent(_) => DropReason::InvalidEvent,
        }
    }

    /// A one-line description for logs and the dead-letter file.
    pub fn detail(&self) -> String {
        match self {
            Rejection::Invalid(invalid) => invalid.to_string(),
            Rejection::Spoofed { claimed } => {
                format!("payload deviceId {claimed:?} differs from the authenticated identity")
            }
            Rejection::Stale { lateness } => format!("{} s late", lateness.as_secs_f64()),
            Rejection::FromFuture { ahead } => {
                format!("device time {} s ahead of now", ahead.as_secs_f64())
            }
            Rejection::Unsupported(detail) | Rejection::BadEvent(detail) => detail.clone(),
        }
    }
}

/// A position that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// The position.
    pub position: Position,
    /// The reference time of its staleness judgement when the hub's enqueued time is
    /// known (for a batch's position, moved back by how much older it is than the
    /// batch's newest): judged again by it if its write waits.
    pub enqueued: Option<DateTime<Utc>>,
    /// How late it was when judged.
    pub lateness: Duration,
}

/// Decodes `payload` (one position or a batch of them, [`wire::decode_message`]) and
/// judges each position it carries, in message order: its `deviceId` against the
/// authenticated `identity`, then the staleness `policy` at `now` (`enqueued` is the hub's
/// enqueued time, when known). A message that cannot be read at all, or a batch that names
/// another drone, is one rejection.
///
/// A batch's positions share the hub's enqueued time, but the drone held the older ones
/// for a while: each is judged by the enqueued time less its age relative to the batch's
/// newest position (both device times come from the same clock, so their difference
/// holds even when that clock is off).
pub fn judge(
    identity: &str,
    payload: &[u8],
    enqueued: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    policy: &StalenessPolicy,
) -> Vec<Result<Accepted, Rejection>> {
    match wire::decode_message(payload) {
        Err(invalid) => vec![Err(Rejection::Invalid(invalid))],
        Ok(Decoded::One(position)) => {
            vec![judge_position(identity, position, enqueued, now, policy)]
        }
        Ok(Decoded::Batch(batch)) if batch.device_id != identity => vec![Err(Rejection::Spoofed {
            claimed: batch.device_id,
        })],
        Ok(Decoded::Batch(batch)) => {
            let newest = batch.positions.iter().flatten().map(|p| p.ts).max();
            batch
                .positions
                .into_iter()
                .map(|element| {
                    let position = element.map_err(Rejection::Invalid)?;
                    let held = newest.map_or(chrono::TimeDelta::zero(), |n| n - position.ts);
                    let reference = enqueued.map(|e| e - held);
                    judge_position(identity, position, reference, now, policy)
                })
                .collect()
        }
    }
}

/// Judges one decoded position.
fn judge_position(
    identity: &str,
    position: Position,
    enqueued: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    policy: &StalenessPolicy,
) -> Result<Accepted, Rejection> {
    if position.device_id != identity {
        return Err(Rejection::Spoofed {
            claimed: position.device_id,
        });
    }
    match freshness(policy, now, position.ts, enqueued) {
        Freshness::Fresh { lateness } => Ok(Accepted {
            position,
            enqueued,
            lateness,
        }),
        Freshness::Stale { lateness } => Err(Rejection::Stale { lateness }),
        Freshness::FromFuture { ahead } => Err(Rejection::FromFuture { ahead }),
    }
}

/// Judges a position with `device_time`, enqueued by the hub at `enqueued` when the
/// source knows it, at `now`: the writer's one staleness rule.
pub fn freshness(
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
    freshness(policy, Utc::now(), device_time, enqueued).is_fresh()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(device: &str, ts: &str) -> Vec<u8> {
        format!(r#"{{"v":1,"deviceId":"{device}","seq":1,"ts":"{ts}","lat":47.6,"lon":-122.3}}"#)
            .into_bytes()
    }

    fn now() -> DateTime<Utc> {
        "2026-11-22T09:20:00Z".parse().unwrap()
    }

    /// The verdict on a message that carries one position.
    fn one(
        identity: &str,
        payload: &[u8],
        enqueued: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
        policy: &StalenessPolicy,
    ) -> Result<Accepted, Rejection> {
        let mut verdicts = judge(identity, payload, enqueued, now, policy);
        assert_eq!(verdicts.len(), 1);
        verdicts.remove(0)
    }

    #[test]
    fn fresh_positions_pass_with_their_lateness() {
        let ok = one(
            "d1",
            &payload("d1", "2026-11-22T09:19:58Z"),
            None,
            now(),
            &StalenessPolicy::default(),
        )
        .unwrap();
        assert_eq!(ok.lateness, Duration::from_secs(2));
        assert_eq!(ok.position.device_id, "d1");
    }

    #[test]
    fn each_rejection_has_its_reason() {
        let policy = StalenessPolicy::default();
        type Case = (&'static str, Vec<u8>, Option<DateTime<Utc>>, DropReason);
        let cases: [Case; 6] = [
            ("d1", b"{not json".to_vec(), None, DropReason::Invalid),
            (
                "d1",
                br#"{"v":2,"deviceId":"d1"}"#.to_vec(),
                None,
                DropReason::Invalid,
            ),
            (
                "d1",
                payload("d2", "2026-11-22T09:19:58Z"),
                None,
                DropReason::Spoofed,
            ),
            (
                "d1",
                payload("d1", "2026-11-22T09:14:59Z"),
                None,
                DropReason::Stale,
            ),
            (
                "d1",
                payload("d1", "2026-11-22T09:25:00Z"),
                None,
                DropReason::FromFuture,
            ),
            // The enqueued time, not the device time, decides staleness.
            (
                "d1",
                payload("d1", "2026-11-22T09:19:58Z"),
                Some("2026-11-22T09:10:00Z".parse().unwrap()),
                DropReason::Stale,
            ),
        ];
        for (identity, bytes, enqueued, reason) in cases {
            let err = one(identity, &bytes, enqueued, now(), &policy).unwrap_err();
            assert_eq!(err.reason(), reason, "{err:?}");
            assert!(!err.detail().is_empty());
        }
    }

    /// A batch of hand-written version 1 elements (not our builder's output).
    fn batch(device: &str, elements: &[Vec<u8>]) -> Vec<u8> {
        let elements: Vec<String> = elements
            .iter()
            .map(|e| String::from_utf8(e.clone()).unwrap())
            .collect();
        format!(
            r#"{{"v":2,"deviceId":"{device}","positions":[{}]}}"#,
            elements.join(",")
        )
        .into_bytes()
    }

    #[test]
    fn a_batch_is_judged_position_by_position() {
        let policy = StalenessPolicy::default();
        let bad =
            br#"{"v":1,"deviceId":"d1","seq":9,"ts":"2026-11-22T09:19:50Z","lat":91,"lon":0}"#;
        let message = batch(
            "d1",
            &[
                payload("d1", "2026-11-22T09:19:30Z"),
                bad.to_vec(),
                payload("d2", "2026-11-22T09:19:40Z"),
                payload("d1", "2026-11-22T09:19:55Z"),
            ],
        );
        let verdicts = judge("d1", &message, None, now(), &policy);
        assert_eq!(verdicts.len(), 4);
        assert_eq!(
            verdicts[0].as_ref().unwrap().lateness,
            Duration::from_secs(30)
        );
        assert_eq!(
            verdicts[1].as_ref().unwrap_err().reason(),
            DropReason::Invalid
        );
        assert_eq!(
            verdicts[2].as_ref().unwrap_err().reason(),
            DropReason::Spoofed
        );
        assert_eq!(
            verdicts[3].as_ref().unwrap().lateness,
            Duration::from_secs(5)
        );
    }

    #[test]
    fn a_batch_naming_another_drone_is_one_rejection() {
        let message = batch("d2", &[payload("d2", "2026-11-22T09:19:55Z")]);
        let verdicts = judge("d1", &message, None, now(), &StalenessPolicy::default());
        assert_eq!(verdicts.len(), 1);
        assert_eq!(
            verdicts[0].as_ref().unwrap_err().reason(),
            DropReason::Spoofed
        );
    }

    #[test]
    fn a_batch_position_held_on_the_drone_is_judged_by_its_own_age() {
        // Enqueued 4 min 50 s ago: the newest position is fresh, the one the drone took
        // 30 s before it is more than 5 minutes old by the hub's clock.
        let enqueued = Some(now() - chrono::TimeDelta::seconds(290));
        let message = batch(
            "d1",
            &[
                payload("d1", "2026-11-22T09:14:00Z"),
                payload("d1", "2026-11-22T09:14:30Z"),
            ],
        );
        let verdicts = judge("d1", &message, enqueued, now(), &StalenessPolicy::default());
        assert_eq!(
            verdicts[0].as_ref().unwrap_err(),
            &Rejection::Stale {
                lateness: Duration::from_secs(320)
            }
        );
        let fresh = verdicts[1].as_ref().unwrap();
        assert_eq!(fresh.lateness, Duration::from_secs(290));
        assert_eq!(fresh.enqueued, enqueued);
    }

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
            freshness(&policy, now, now - seconds(2), None),
            Freshness::Fresh {
                lateness: Duration::from_secs(2)
            }
        );
    }
}

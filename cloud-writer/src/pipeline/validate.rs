//! Judging one message: decode, identity check, staleness. Pure; no I/O.

use std::time::Duration;

use chrono::{DateTime, Utc};
use telemetry::wire::{self, Invalid, Position};
use telemetry::{Freshness, StalenessPolicy};

use super::staleness;

use crate::metrics::DropReason;

/// Why a message is not written.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// The payload is not a valid version 1 position.
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
}

impl Rejection {
    /// The drop reason.
    pub fn reason(&self) -> DropReason {
        match self {
            Rejection::Invalid(_) => DropReason::Invalid,
            Rejection::Spoofed { .. } => DropReason::Spoofed,
            Rejection::Stale { .. } => DropReason::Stale,
            Rejection::FromFuture { .. } => DropReason::FromFuture,
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
        }
    }
}

/// A message that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// The position.
    pub position: Position,
    /// How late it was when judged.
    pub lateness: Duration,
}

/// Decodes `payload`, checks it against the authenticated `identity` and the staleness
/// `policy` at `now` (`enqueued` is the hub's enqueued time, when known).
pub fn judge(
    identity: &str,
    payload: &[u8],
    enqueued: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    policy: &StalenessPolicy,
) -> Result<Accepted, Rejection> {
    let position = wire::decode(payload).map_err(Rejection::Invalid)?;
    if position.device_id != identity {
        return Err(Rejection::Spoofed {
            claimed: position.device_id,
        });
    }
    match staleness::judge(policy, now, position.ts, enqueued) {
        Freshness::Fresh { lateness } => Ok(Accepted { position, lateness }),
        Freshness::Stale { lateness } => Err(Rejection::Stale { lateness }),
        Freshness::FromFuture { ahead } => Err(Rejection::FromFuture { ahead }),
    }
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

    #[test]
    fn fresh_positions_pass_with_their_lateness() {
        let ok = judge(
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
            let err = judge(identity, &bytes, enqueued, now(), &policy).unwrap_err();
            assert_eq!(err.reason(), reason, "{err:?}");
            assert!(!err.detail().is_empty());
        }
    }
}

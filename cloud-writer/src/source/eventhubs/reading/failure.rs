//! How a session of the Event Hubs source ends and how its failures are told: whether the
//! hub refused the connection string (the writer stops, naming the setting) or something
//! passing failed (a new session after a backoff), the root cause under the SDK's layers,
//! and one log line per interval at most.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use azure_core::http::StatusCode;
use azure_core_amqp::AmqpError;
use azure_core_amqp::error::{AmqpErrorCondition, AmqpErrorKind};
use azure_messaging_eventhubs::EventHubsError;
use tokio_util::sync::CancellationToken;

use super::stall::Stall;
use crate::metrics::SessionBreak;

/// Whether the hub refused the client itself: a management or claims-based-security
/// answer 401, 403 or 404, or a link refused as unauthorized or not found. The connection
/// string (its key, policy or entity) is wrong, not the network.
pub(super) fn hub_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(amqp) = err.downcast_ref::<AmqpError>() {
            match amqp.kind() {
                AmqpErrorKind::ManagementStatusCode(
                    StatusCode::Unauthorized | StatusCode::Forbidden | StatusCode::NotFound,
                    _,
                ) => return true,
                AmqpErrorKind::AmqpDescribedError(described)
                    if matches!(
                        described.condition,
                        AmqpErrorCondition::UnauthorizedAccess | AmqpErrorCondition::NotFound
                    ) =>
                {
                    return true;
                }
                _ => {}
            }
        }
        cause = err.source();
    }
    false
}

/// The error's message and, when deeper, its root cause (the SDK wraps the hub's answer
/// in several layers).
pub(super) fn cause_of(err: &(dyn std::error::Error + 'static)) -> String {
    let mut root = err;
    while let Some(source) = root.source() {
        root = source;
    }
    let (top, root) = (err.to_string(), root.to_string());
    if top.contains(&root) {
        top
    } else {
        format!("{top}: {root}")
    }
}

/// Why a session ended.
pub(super) enum SessionEnd {
    /// The source stops.
    Stopped,
    /// The session failed; another starts after a backoff.
    Failed(Failure),
}

/// A failed session.
pub(super) struct Failure {
    /// What failed.
    pub(super) what: SessionBreak,
    /// Why.
    pub(super) cause: String,
    /// The hub refused the connection string.
    pub(super) refused: bool,
}

impl Failure {
    pub(super) fn of(what: SessionBreak, err: &EventHubsError) -> SessionEnd {
        SessionEnd::Failed(Failure {
            what,
            cause: cause_of(err),
            refused: hub_refused(err),
        })
    }
}

/// Logs failed sessions, one line per interval at most (the others at debug level).
pub(super) struct Reporter {
    pub(super) every: Duration,
    pub(super) last: Option<Instant>,
    pub(super) quiet: u32,
}

impl Reporter {
    pub(super) fn failed(&mut self, hub: &str, failure: &Failure, retry_in: Duration) {
        if self.last.is_some_and(|last| last.elapsed() < self.every) {
            self.quiet += 1;
            tracing::debug!(%hub, what = failure.what.describe(), cause = %failure.cause, ?retry_in, "Event Hubs source: rebuilding");
            return;
        }
        tracing::warn!(
            %hub,
            what = failure.what.describe(),
            cause = %failure.cause,
            ?retry_in,
            failures_since_last_line = self.quiet + 1,
            "Event Hubs source disconnected: rebuilding the consumer and its processor; the checkpoints written so far are kept and reading resumes from them"
        );
        self.last = Some(Instant::now());
        self.quiet = 0;
    }
}

/// How many readings of one partition in a row may fail before delivering any event
/// before the session is taken as broken.
const UNREAD_LOSSES_BEFORE_REBUILD: u32 = 2;

/// Whether the AMQP session the partition readers share is broken, so that the source
/// rebuilds its connection: its receivers cannot attach, or they stalled
/// ([`super::stall`]).
///
/// The SDK's receivers share one session. When the hub drops that session, the SDK's
/// recovery attaches again under link names the session already holds ("Link name is not
/// unique") and from then on every attach fails ("Illegal session state"), while the
/// processor keeps the partition's ownership and hands it out again every interval: a
/// partition owned and never read. A partition whose readings fail twice in a row before
/// any event marks the session broken (a reading displaced by another owner's receiver,
/// `amqp:link:stolen`, is not a failure and is not told here).
#[derive(Debug, Clone, Default)]
pub(super) struct SessionHealth {
    broken: CancellationToken,
    cause: Arc<Mutex<Option<(SessionBreak, String)>>>,
    /// Readings in a row of each partition that ended before any event.
    unread: Arc<Mutex<HashMap<String, u32>>>,
}

impl SessionHealth {
    /// A reading of `partition` failed after `events` events because of `why`.
    pub(super) fn reading_failed(&self, partition: &str, events: u64, why: &str) {
        let mut unread = self.unread.lock().unwrap_or_else(|e| e.into_inner());
        if events > 0 {
            unread.remove(partition);
            return;
        }
        let count = unread.entry(partition.to_owned()).or_default();
        *count += 1;
        if *count >= UNREAD_LOSSES_BEFORE_REBUILD {
            let cause = format!(
                "partition {partition} lost {count} times in a row before any event: {why}"
            );
            drop(unread);
            self.broke(SessionBreak::ReceiversCannotAttach, cause);
        }
    }

    /// The receivers of `stalls` deliver nothing while the hub holds newer events.
    pub(super) fn stalled(&self, stalls: &[Stall]) {
        let each: Vec<String> = stalls
            .iter()
            .map(|s| {
                let delivered = s.delivered.map_or("none".into(), |d| d.to_string());
                format!(
                    "partition {} (the hub holds up to {}, delivered up to {delivered}, for {:.1} s)",
                    s.partition,
                    s.held,
                    s.undelivered_for.as_secs_f64()
                )
            })
            .collect();
        let cause = format!(
            "receivers waiting for events the hub holds: {}",
            each.join(", ")
        );
        self.broke(SessionBreak::ReceiversStalled, cause);
    }

    /// The first break is kept.
    fn broke(&self, what: SessionBreak, cause: String) {
        let mut kept = self.cause.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_none() {
            *kept = Some((what, cause));
        }
        self.broken.cancel();
    }

    /// Resolves with what broke and why once the session is taken as broken.
    pub(super) async fn broken(&self) -> (SessionBreak, String) {
        self.broken.cancelled().await;
        self.cause
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or((SessionBreak::ReceiversCannotAttach, String::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_told_from_a_network_failure() {
        let refused = |code| {
            EventHubsError::from(AmqpError::from(azure_core::Error::with_error(
                azure_core::error::ErrorKind::Other,
                AmqpError::from(AmqpErrorKind::ManagementStatusCode(
                    code,
                    Some("signature does not match".into()),
                )),
                "Error authorizing management path",
            )))
        };
        let unauthorized = refused(StatusCode::Unauthorized);
        assert!(hub_refused(&unauthorized));
        assert!(
            cause_of(&unauthorized).contains("401"),
            "{}",
            cause_of(&unauthorized)
        );
        assert!(hub_refused(&refused(StatusCode::NotFound)));
        assert!(!hub_refused(&refused(StatusCode::ServiceUnavailable)));
        let unreachable = EventHubsError::from(AmqpError::from(azure_core::Error::new(
            azure_core::error::ErrorKind::Io,
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        )));
        assert!(!hub_refused(&unreachable));
    }

    #[tokio::test]
    async fn stalled_receivers_mark_the_session_broken_and_the_first_break_is_kept() {
        let health = SessionHealth::default();
        health.stalled(&[Stall {
            partition: "7".into(),
            held: 20,
            delivered: Some(12),
            undelivered_for: Duration::from_millis(15_400),
        }]);
        health.reading_failed("3", 0, "Illegal session state");
        health.reading_failed("3", 0, "Illegal session state");
        assert_eq!(
            health.broken().await,
            (
                SessionBreak::ReceiversStalled,
                "receivers waiting for events the hub holds: partition 7 (the hub holds up to 20, delivered up to 12, for 15.4 s)".into()
            )
        );
    }

    #[tokio::test]
    async fn a_partition_lost_twice_before_any_event_marks_the_session_broken() {
        let health = SessionHealth::default();
        let broken = |health: &SessionHealth| health.broken.is_cancelled();
        // A reading that delivered resets the count.
        health.reading_failed("2", 0, "Illegal session state");
        health.reading_failed("2", 5, "Illegal session state");
        health.reading_failed("2", 0, "Illegal session state");
        assert!(!broken(&health));
        health.reading_failed("3", 0, "Session has dropped");
        health.reading_failed("3", 0, "Illegal session state");
        assert!(broken(&health));
        assert_eq!(
            health.broken().await,
            (
                SessionBreak::ReceiversCannotAttach,
                "partition 3 lost 2 times in a row before any event: Illegal session state".into()
            )
        );
    }
}

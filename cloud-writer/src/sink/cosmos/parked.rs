//! Writes parked while the stream is held ([`super::hold`]): what is parked, how a
//! probe's answer is reported, the probe request, how parked writes are sent again or
//! dropped when they turned stale, and, before each probe after a 401/403, the key file read
//! again or a new Entra ID token asked for.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::driver::WriteEngine;
use super::hold::{ProbeResult, Resubmit};
use super::in_flight::Parked;
use super::newest_wins::Final;
use super::refusal::{self, Refusal};
use crate::metrics::HoldReason;

impl WriteEngine {
    /// A probe got an answer other than a refusal of every write.
    pub(super) fn answered(&self, probe: &mut bool) {
        if std::mem::take(probe) {
            self.hold.probe_result(ProbeResult::Passed);
        }
    }

    /// A probe ended without an answer that tells (it turned stale).
    pub(super) fn unanswered(&self, probe: &mut bool) {
        if std::mem::take(probe) {
            self.hold.probe_result(ProbeResult::Inconclusive);
        }
    }

    /// Parks a write refused for `cause` (holding the stream).
    pub(super) fn park(&self, parked: Parked, cause: HoldReason) {
        let (parked, probe) = match parked {
            Parked::Latest(mut p, step) => {
                let probe = std::mem::take(&mut p.probe);
                (Parked::Latest(p, step), probe)
            }
            Parked::History(mut h) => {
                let probe = std::mem::take(&mut h.probe);
                (Parked::History(h), probe)
            }
            Parked::Agent(mut a, step) => {
                let probe = std::mem::take(&mut a.probe);
                (Parked::Agent(a, step), probe)
            }
        };
        self.hold.park(parked, cause, probe);
    }

    /// Reads the key file again and signs with its key from now on.
    pub(super) fn reload_key(&self) {
        let Some(path) = &self.settings.key_file else {
            return;
        };
        let key = crate::config::read_key_file(path)
            .map_err(|e| e.to_string())
            .and_then(|key| {
                cosmos::MasterKey::from_base64(key.expose())
                    .map_err(|e| format!("COSMOS_KEY_FILE is not a base64 account key: {e}"))
            });
        match key {
            Ok(key) => self.container.client().set_master_key(key),
            Err(err) => tracing::warn!(error = %err, "cannot read COSMOS_KEY_FILE again"),
        }
    }
}

impl Resubmit<Parked> for WriteEngine {
    fn resubmit(self: Arc<Self>, item: Parked, probe: bool) -> BoxFuture<'static, bool> {
        async move {
            match item {
                Parked::Latest(mut pending, step) => {
                    pending.probe = probe;
                    self.retry_or_stale(pending, step).await
                }
                Parked::History(mut doc) => {
                    doc.probe = probe;
                    self.resubmit_history(doc).await
                }
                Parked::Agent(mut pending, step) => {
                    pending.probe = probe;
                    self.resubmit_agent(pending, step).await;
                    true
                }
            }
        }
        .boxed()
    }

    fn before_probe(&self, cause: HoldReason) {
        if cause == HoldReason::Unauthorized {
            self.reload_key();
            self.container.client().credential_refused();
        }
    }

    /// Reads the container's properties: answered, the key is accepted, the container is
    /// there and the service answers.
    fn probe(self: Arc<Self>) -> BoxFuture<'static, Result<(), HoldReason>> {
        async move {
            match self.container.properties().await {
                Ok(_) => Ok(()),
                Err(err) => match refusal::of_error(&err) {
                    Refusal::Hold(cause) => Err(cause),
                    // Throttled, or refused for another reason than the container's: the
                    // service answers for the container.
                    Refusal::None | Refusal::Again | Refusal::Document(_) => Ok(()),
                },
            }
        }
        .boxed()
    }

    fn keep_if_fresh(&self, item: Parked) -> Option<Parked> {
        match item {
            Parked::Latest(pending, step) => {
                if self.is_fresh(pending.position.ts, pending.enqueued) {
                    Some(Parked::Latest(pending, step))
                } else {
                    self.finish(*pending, Final::StaleInRetry, None);
                    None
                }
            }
            Parked::History(doc) => self.keep_history_if_fresh(doc).map(Parked::History),
            // A fact does not turn stale: its order is kept on the server.
            agent @ Parked::Agent(..) => Some(agent),
        }
    }
}

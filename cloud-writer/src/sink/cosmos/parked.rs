//! The write engine as the hold sees it ([`super::hold`]'s `Resubmit`): parked writes sent
//! again or dropped when they turned stale (latest documents only), the probe request, and, before each probe after a
//! 401/403, the key file read again or a new Entra ID token asked for. Parking itself and
//! the probe's answers are the engine's ([`super::engine`]).

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::engine::WriteEngine;
use super::hold::Resubmit;
use super::in_flight::Parked;
use super::newest_wins::Final;
use super::refusal::{self, Refusal};
use crate::metrics::HoldReason;

impl Resubmit<Parked> for WriteEngine {
    fn resubmit(self: Arc<Self>, item: Parked, probe: bool) -> BoxFuture<'static, bool> {
        async move {
            match item {
                Parked::Latest(mut pending, step) => {
                    pending.probe = probe;
                    self.retry_or_stale(pending, step).await
                }
                Parked::Agent(mut pending, step) => {
                    pending.probe = probe;
                    self.resubmit_agent(pending, step).await;
                    true
                }
                Parked::Segment(mut pending) => {
                    pending.probe = probe;
                    self.send_segment(pending).await;
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
            // A fact does not turn stale: its order is kept on the server.
            agent @ Parked::Agent(..) => Some(agent),
            // Nor does a track: staleness is the latest document's rule.
            segment @ Parked::Segment(..) => Some(segment),
        }
    }
}

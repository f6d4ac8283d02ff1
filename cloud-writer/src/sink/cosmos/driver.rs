//! The sink's driver: the write engine shared by the submitting side and the outcome task, the
//! in-flight limit, building and submitting the bulk operations, and the outcome loop that
//! classifies each answer ([`super::refusal`]) and feeds the rest to the state
//! machine ([`super::newest_wins`]) until every position is final and acknowledged.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cosmos::{BulkOperation, BulkOutcomes, BulkWriter, ContainerClient, OperationType, Outcome};
use tokio::sync::{Notify, Semaphore};

use super::encode::Encoder;
use super::high_water::HighWater;
use super::hold::Hold;
use super::in_flight::{Ctx, OutcomeInfo, Parked, Pending};
use super::newest_wins::{self, Final, Next, Step};
use super::refusal::{self, Refusal};
use super::settings::SinkSettings;
use crate::config::NewestWins;
use crate::metrics::{DocumentKind, DropReason, Metrics};
use crate::pipeline::reject::Rejects;
use crate::pipeline::staleness;

/// The write machinery of the sink (the bulk writer, the high-water marks, the in-flight
/// limit, the hold), shared by the submitting side and the outcome task.
pub(super) struct WriteEngine {
    pub(super) writer: BulkWriter<Ctx>,
    pub(super) container: ContainerClient,
    pub(super) encoder: Encoder,
    pub(super) settings: SinkSettings,
    pub(super) metrics: Arc<Metrics>,
    pub(super) high_water: Mutex<HighWater>,
    pub(super) in_flight: AtomicUsize,
    pub(super) idle: Notify,
    /// The in-flight limit: one permit per position or history document not yet final.
    pub(super) slots: Semaphore,
    pub(super) reads: Semaphore,
    /// The query reading a stored document's order (ETag mode).
    pub(super) read_query: String,
    pub(super) hold: Arc<Hold<Parked>>,
    pub(super) rejects: Rejects,
}

impl WriteEngine {
    /// Takes a write in: waits while the stream is held and while the in-flight limit is
    /// reached.
    pub(super) async fn enter(&self) {
        self.hold.wait_open().await;
        if let Ok(slot) = self.slots.acquire().await {
            slot.forget();
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.metrics.add_in_flight(1);
    }

    pub(super) fn leave(&self) {
        self.metrics.add_in_flight(-1);
        let last = self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1;
        // After the count, so that in flight never reads above the limit.
        self.slots.add_permits(1);
        if last {
            self.idle.notify_waiters();
        }
    }

    pub(super) async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The operation of `step` for a position; a Replace carries the position's `ifMatch`.
    pub(super) fn op(&self, mut pending: Box<Pending>, step: Step) -> BulkOperation<Ctx> {
        let encoder = &self.encoder;
        let p = &mut *pending;
        let (kind, id, body) = match step {
            Step::Patch => (
                OperationType::Patch,
                Some(p.doc_id.clone()),
                p.patch
                    .get_or_insert_with(|| {
                        encoder
                            .patch(&p.position, p.enqueued)
                            .expect("patch steps are taken in patch mode")
                    })
                    .clone(),
            ),
            Step::Create | Step::Replace => {
                let latest = p
                    .latest
                    .get_or_insert_with(|| encoder.latest(&p.position, p.enqueued))
                    .clone();
                match step {
                    Step::Create => (OperationType::Create, None, latest),
                    _ => (OperationType::Replace, Some(p.doc_id.clone()), latest),
                }
            }
        };
        let if_match = match step {
            Step::Replace => pending.if_match.clone(),
            Step::Create | Step::Patch => None,
        };
        BulkOperation {
            kind,
            partition_key: encoder.partition_key(&pending.position.device_id),
            id,
            body,
            if_match,
            context: Ctx::Latest(pending, step),
        }
    }

    pub(super) async fn submit(&self, op: BulkOperation<Ctx>) {
        if let Err(closed) = self.writer.submit(op).await {
            // Only after close, which waits for idleness: abandon, the message comes again.
            tracing::error!("bulk writer closed with a write pending");
            drop(closed);
            self.leave();
        }
    }

    /// Whether a position (or history document) taken earlier with `device_time`,
    /// enqueued at `enqueued`, is still fresh ([`staleness::still_fresh`]).
    pub(super) fn is_fresh(
        &self,
        device_time: DateTime<Utc>,
        enqueued: Option<DateTime<Utc>>,
    ) -> bool {
        staleness::still_fresh(&self.settings.staleness, device_time, enqueued)
    }

    /// Submits a position again (the same step, a Replace with its `ifMatch`) unless it
    /// turned stale meanwhile; `false` when it did.
    pub(super) async fn retry_or_stale(
        self: &Arc<Self>,
        pending: Box<Pending>,
        step: Option<Step>,
    ) -> bool {
        if !self.is_fresh(pending.position.ts, pending.enqueued) {
            self.finish(*pending, Final::StaleInRetry, None);
            return false;
        }
        match (step, self.settings.newest_wins) {
            (Some(step), _) => {
                let op = self.op(pending, step);
                self.submit(op).await;
            }
            (None, NewestWins::Patch) => {
                let op = self.op(pending, Step::Patch);
                self.submit(op).await;
            }
            (None, NewestWins::Etag) => self.clone().read_then_write(pending),
        }
        true
    }

    /// Records a position's final outcome and acknowledges its message.
    pub(super) fn finish(&self, mut pending: Pending, outcome: Final, etag: Option<String>) {
        match outcome {
            // Sent as the probe and turned stale before an answer: it tells nothing.
            Final::StaleInRetry => self.unanswered(&mut pending.probe),
            _ => self.answered(&mut pending.probe),
        }
        match outcome {
            Final::Written => {
                self.metrics.written(DocumentKind::Latest);
                let now = Utc::now();
                let since_enqueued = match pending.enqueued {
                    Some(enqueued) => (now - enqueued).to_std().unwrap_or(Duration::ZERO),
                    None => pending.received_at.elapsed(),
                };
                let since_device = (now - pending.position.ts)
                    .to_std()
                    .unwrap_or(Duration::ZERO);
                self.metrics.lateness(since_enqueued, since_device);
                self.high_water
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .raise(&pending.position.device_id, pending.order, etag);
            }
            Final::Superseded => self.metrics.dropped(DropReason::Superseded),
            Final::StaleInRetry => self.metrics.dropped(DropReason::StaleInRetry),
            Final::Refused(reason) => {
                let payload = pending
                    .latest
                    .as_deref()
                    .or(pending.patch.as_deref())
                    .unwrap_or_default();
                let detail = format!("Cosmos DB refused the document of {}", pending.doc_id);
                self.rejects
                    .record_refused(&pending.position.device_id, reason, detail, payload);
            }
            Final::Failed => self.metrics.dropped(DropReason::WriteFailed),
        }
        pending.ack.finish();
        self.leave();
    }

    /// Handles one outcome of a latest-document operation.
    pub(super) async fn on_latest(
        self: &Arc<Self>,
        mut pending: Box<Pending>,
        step: Step,
        outcome: OutcomeInfo,
    ) {
        let OutcomeInfo {
            status,
            error,
            etag,
            whole_request,
        } = outcome;
        match refusal::of_outcome(step.kind(), status, error.as_ref(), whole_request) {
            Refusal::Hold(cause) => return self.park(Parked::Latest(pending, Some(step)), cause),
            Refusal::Again => {
                self.answered(&mut pending.probe);
                tracing::debug!(device = %pending.position.device_id, status, "throttled past the retry budget; submitting again");
                self.retry_or_stale(pending, Some(step)).await;
                return;
            }
            Refusal::Document(reason) => {
                return self.finish(*pending, Final::Refused(reason), None);
            }
            Refusal::None => self.answered(&mut pending.probe),
        }
        let mode = self.settings.newest_wins;
        match newest_wins::next(step, status, mode, &mut pending.rounds) {
            Next::Finish(outcome) => self.finish(*pending, outcome, etag),
            Next::Send(step) => {
                let op = self.op(pending, step);
                self.submit(op).await;
            }
            Next::Read => {
                self.high_water
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .forget_etag(&pending.position.device_id);
                self.clone().read_then_write(pending);
            }
            Next::Unexpected => {
                tracing::error!(device = %pending.position.device_id, ?step, status, error = ?error, "write rejected by Cosmos DB; dropped");
                self.finish(*pending, Final::Failed, None);
            }
        }
    }
}

pub(super) async fn outcome_loop(engine: Arc<WriteEngine>, mut outcomes: BulkOutcomes<Ctx>) {
    let mut last_stats = Instant::now();
    while let Some(outcome) = outcomes.next().await {
        let Outcome {
            context,
            status,
            substatus,
            request_charge,
            etag,
            range_id,
            error,
            whole_request,
            ..
        } = outcome;
        engine.metrics.cosmos_op(status, substatus);
        engine.metrics.request_units(&range_id, request_charge);
        let info = OutcomeInfo {
            status,
            error,
            etag,
            whole_request,
        };
        match context {
            Ctx::Latest(pending, step) => engine.on_latest(pending, step, info).await,
            Ctx::History(doc) => engine.on_history(doc, info).await,
            Ctx::Agent(pending, step) => engine.on_agent(pending, step, info).await,
        }
        if last_stats.elapsed() >= Duration::from_millis(500) {
            last_stats = Instant::now();
            publish_stats(&engine);
        }
    }
    publish_stats(&engine);
}

fn publish_stats(engine: &WriteEngine) {
    for (range, stats) in engine.writer.stats().ranges {
        engine
            .metrics
            .set_throttled(&range, stats.throttled_operations);
    }
}

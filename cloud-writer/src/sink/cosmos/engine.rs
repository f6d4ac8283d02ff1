//! The sink's write engine, all of it: the machinery shared by the submitting side and the
//! outcome task (the bulk writer, the high-water marks, the in-flight limit, the hold),
//! building and submitting the bulk operations of positions and agent facts (track
//! segments' own steps: [`super::segment_write`]), and each answer's next step: classified ([`super::refusal`]), then fed to
//! the state machine ([`super::newest_wins`]) until every write is final and acknowledged;
//! parking while the stream is held ([`super::hold`]) and the ETag mode's read.
//! The outcome task ([`outcome_loop`], at the end) hands each bulk answer to the engine
//! by what it answered (a position, an agent fact) and publishes the throttling counts
//! every half second.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cosmos::{BulkOperation, BulkOutcomes, BulkWriter, ContainerClient, OperationType, Outcome};
use telemetry::document::document_id;
use tokio::sync::{Notify, Semaphore};

use super::agent;
use super::encode::Encoder;
use super::high_water::HighWater;
use super::hold::{Hold, ProbeResult};
use super::in_flight::{AgentPending, Ctx, OutcomeInfo, Parked, Pending};
use super::newest_wins::{self, AfterRead, Final, Next, Step};
use super::read;
use super::refusal::{self, Refusal};
use super::segments::Segments;
use super::settings::SinkSettings;
use crate::config::NewestWins;
use crate::metrics::{DocumentKind, DropReason, HoldReason, Metrics};
use crate::pipeline::AgentWrite;
use crate::pipeline::reject::Rejects;
use crate::pipeline::validate;

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
    /// Positions held for track segments, and the segments this writer stored.
    pub(super) segments: Mutex<Segments>,
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

    /// The held stretches and known segments.
    pub(super) fn segments(&self) -> std::sync::MutexGuard<'_, Segments> {
        self.segments.lock().unwrap_or_else(|e| e.into_inner())
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
    /// enqueued at `enqueued`, is still fresh ([`validate::still_fresh`]).
    pub(super) fn is_fresh(
        &self,
        device_time: DateTime<Utc>,
        enqueued: Option<DateTime<Utc>>,
    ) -> bool {
        validate::still_fresh(&self.settings.staleness, device_time, enqueued)
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
        match self.classify(step, &outcome, &mut pending.probe) {
            Refusal::Hold(cause) => return self.park(Parked::Latest(pending, Some(step)), cause),
            Refusal::Again => {
                let status = outcome.status;
                tracing::debug!(device = %pending.position.device_id, status, "throttled past the retry budget; submitting again");
                self.retry_or_stale(pending, Some(step)).await;
                return;
            }
            Refusal::Document(reason) => {
                return self.finish(*pending, Final::Refused(reason), None);
            }
            Refusal::None => {}
        }
        let (status, mode) = (outcome.status, self.settings.newest_wins);
        match newest_wins::next(step, status, mode, &mut pending.rounds) {
            Next::Finish(done) => self.finish(*pending, done, outcome.etag),
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
                tracing::error!(device = %pending.position.device_id, ?step, status, error = ?outcome.error, "write rejected by Cosmos DB; dropped");
                self.finish(*pending, Final::Failed, None);
            }
        }
    }

    // Agent facts ([`super::agent`]).

    /// The operation of `step` (Patch or Create) for an agent fact.
    pub(super) fn agent_op(&self, pending: Box<AgentPending>, step: Step) -> BulkOperation<Ctx> {
        let fact = &pending.write.fact;
        let (kind, id, body) = match step {
            Step::Create => (
                OperationType::Create,
                None,
                agent::document(self.encoder.layout(), &pending.write.device_id, fact),
            ),
            Step::Patch | Step::Replace => (
                OperationType::Patch,
                Some(pending.doc_id.clone()),
                agent::patch(fact),
            ),
        };
        BulkOperation {
            kind,
            partition_key: self.encoder.partition_key(&pending.write.device_id),
            id,
            body,
            if_match: None,
            context: Ctx::Agent(pending, step),
        }
    }

    /// Starts writing an agent fact; waits while the stream is held or the in-flight limit
    /// is reached.
    pub(super) async fn write_agent(&self, write: AgentWrite) {
        if self.settings.newest_wins == NewestWins::Etag {
            let detail = "agent facts need Patch; NEWEST_WINS=etag cannot store them".to_owned();
            let body = agent::patch(&write.fact);
            self.rejects.record_refused(
                &write.device_id,
                DropReason::UnsupportedEvent,
                detail,
                &body,
            );
            return write.ack.finish();
        }
        self.enter().await;
        let pending = Box::new(AgentPending {
            doc_id: document_id(&write.device_id).into_owned(),
            write,
            probe: false,
            rounds: 0,
        });
        self.submit(self.agent_op(pending, Step::Patch)).await;
    }

    /// Sends a parked fact again (facts do not turn stale: their order is on the server).
    pub(super) async fn resubmit_agent(&self, pending: Box<AgentPending>, step: Step) {
        self.submit(self.agent_op(pending, step)).await;
    }

    /// Handles one outcome of an agent fact's operation.
    pub(super) async fn on_agent(
        self: &Arc<Self>,
        mut pending: Box<AgentPending>,
        step: Step,
        info: OutcomeInfo,
    ) {
        match self.classify(step, &info, &mut pending.probe) {
            Refusal::Hold(cause) => return self.park(Parked::Agent(pending, step), cause),
            Refusal::Again => return self.resubmit_agent(pending, step).await,
            Refusal::Document(reason) => {
                let detail = format!("Cosmos DB refused the agent fact of {}", pending.doc_id);
                let body = agent::patch(&pending.write.fact);
                self.rejects
                    .record_refused(&pending.write.device_id, reason, detail, &body);
                return self.finish_agent(*pending, None);
            }
            Refusal::None => {}
        }
        let OutcomeInfo { status, error, .. } = info;
        match newest_wins::next(step, status, NewestWins::Patch, &mut pending.rounds) {
            Next::Finish(outcome) => self.finish_agent(*pending, Some(outcome)),
            Next::Send(step) => {
                let op = self.agent_op(pending, step);
                self.submit(op).await;
            }
            Next::Read | Next::Unexpected => {
                tracing::error!(device = %pending.write.device_id, ?step, status, error = ?error, "agent fact rejected by Cosmos DB; dropped");
                self.finish_agent(*pending, Some(Final::Failed));
            }
        }
    }

    /// Counts a fact's final outcome (`None`: refused, counted already) and acknowledges
    /// its message.
    fn finish_agent(&self, pending: AgentPending, outcome: Option<Final>) {
        match outcome {
            Some(Final::Written) => self.metrics.written(DocumentKind::Agent),
            Some(Final::Superseded) => self.metrics.dropped(DropReason::Superseded),
            Some(Final::Failed | Final::StaleInRetry | Final::Refused(_)) => {
                self.metrics.dropped(DropReason::WriteFailed)
            }
            None => {}
        }
        pending.write.ack.finish();
        self.leave();
    }

    // The hold ([`super::hold`]): probes' answers, parking, the key read again.

    /// Classifies the answer to an operation of `step` ([`refusal::of_outcome`]); any
    /// answer but a refusal of every write tells the write's probe (if it is one) that
    /// it passed.
    pub(super) fn classify(&self, step: Step, outcome: &OutcomeInfo, probe: &mut bool) -> Refusal {
        let refusal = refusal::of_outcome(
            step.kind(),
            outcome.status,
            outcome.error.as_ref(),
            outcome.whole_request,
        );
        if !matches!(refusal, Refusal::Hold(_)) {
            self.answered(probe);
        }
        refusal
    }

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
            Parked::Agent(mut a, step) => {
                let probe = std::mem::take(&mut a.probe);
                (Parked::Agent(a, step), probe)
            }
            Parked::Segment(mut s) => {
                let probe = std::mem::take(&mut s.probe);
                (Parked::Segment(s), probe)
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

    // The ETag mode's read ([`super::read`]).

    /// ETag mode: reads the stored document, then replaces, creates, or finds the
    /// position superseded.
    pub(super) fn read_then_write(self: Arc<Self>, mut pending: Box<Pending>) {
        tokio::spawn(async move {
            if !newest_wins::take_round(&mut pending.rounds) {
                self.finish(*pending, Final::Failed, None);
                return;
            }
            let read = {
                let _permit = self.reads.acquire().await;
                let device = &pending.position.device_id;
                read::read_stored(&self.container, &self.read_query, device, &pending.doc_id).await
            };
            let refusal = match &read {
                Ok(_) => Refusal::None,
                Err(err) => refusal::of_error(err),
            };
            match refusal {
                Refusal::Hold(cause) => return self.park(Parked::Latest(pending, None), cause),
                Refusal::None | Refusal::Again | Refusal::Document(_) => {
                    self.answered(&mut pending.probe);
                }
            }
            let stored = match read {
                Ok(stored) => stored,
                Err(err) => {
                    tracing::warn!(device = %pending.position.device_id, error = %err, "reading the stored document failed; retrying");
                    tokio::time::sleep(read::READ_RETRY_PAUSE).await;
                    self.retry_or_stale(pending, None).await;
                    return;
                }
            };
            let step =
                match newest_wins::after_read(stored.as_ref().map(|s| s.order), pending.order) {
                    AfterRead::Superseded => {
                        if let Some(stored) = stored {
                            self.high_water
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .raise(&pending.position.device_id, stored.order, stored.etag);
                        }
                        return self.finish(*pending, Final::Superseded, None);
                    }
                    AfterRead::Replace => {
                        pending.if_match = stored.and_then(|s| s.etag);
                        Step::Replace
                    }
                    AfterRead::Create => Step::Create,
                };
            let op = self.op(pending, step);
            self.submit(op).await;
        });
    }
}

/// The sink's outcome task: each bulk answer to the engine, until the bulk writer closes.
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
        engine
            .metrics
            .request_units(&range_id, context.kind(), request_charge);
        let info = OutcomeInfo {
            status,
            error,
            etag,
            whole_request,
        };
        match context {
            Ctx::Latest(pending, step) => engine.on_latest(pending, step, info).await,
            Ctx::Agent(pending, step) => engine.on_agent(pending, step, info).await,
            Ctx::Segment(pending, step) => engine.on_segment(pending, step, info).await,
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

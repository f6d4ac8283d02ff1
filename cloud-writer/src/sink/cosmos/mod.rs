//! The Cosmos DB sink: turns coalesced positions into bulk operations and drives each
//! to a final outcome under the newest-wins rule.
//!
//! # Newest wins
//! The server decides, so the rule holds across batches in flight together, replicas and
//! restarts:
//! - [`NewestWins::Patch`]: a Patch of the drone's document with the condition "stored
//!   position older than this one" (`deviceTimeMs`, then `seq`). 200: written;
//!   412: superseded (final); 404: Create the full document; a Create answered 409 (another
//!   write created it meanwhile) goes back to the conditional Patch.
//! - [`NewestWins::Etag`]: read the stored document's order and ETag (or use the ETag
//!   this writer last wrote), compare orders in memory, Replace with `ifMatch` (Create
//!   when absent); 412 or 409 read again. For servers without Patch in batches.
//!
//! A drone this process has not written yet (no high-water mark) starts with the Create:
//! a new document then costs one operation instead of a Patch answered 404 and a Create
//! (an import or the first minute of a fleet), and an existing one answers 409, after
//! which the position goes on as above. A Create never replaces anything, so the order
//! of the attempts does not weaken the rule.
//!
//! A per-drone high-water mark ([`HighWater`]) skips positions already known superseded.
//!
//! # Refusals
//! Every answer that is not the state machine's business is classified
//! ([`super::refusal`]): throttling past the retry budget is submitted again; a refusal of
//! the document alone (too large, malformed) is dead-lettered and counted; a refusal that
//! would hit every write (authorization, missing container, unsupported operation, outage)
//! parks the position and holds the stream ([`super::hold`]) until a probe gets through,
//! then every parked position is sent again. A resubmitted Replace keeps its `ifMatch`. A
//! position that turns stale while retried or parked is dropped as `stale_in_retry`.
//! Every position ends written, superseded, stale or refused (counted), and only then is
//! its message acknowledged. Positions count against the in-flight limit from the moment
//! the sink takes them, reads and parked ones included.
//!
//! Files: this one holds the sink and the positions' state machine; `history.rs` the
//! history documents; `parked.rs` what is parked while the stream is held and how it is
//! sent again.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use cosmos::{
    BulkConfig, BulkOperation, BulkOutcomes, BulkWriter, ContainerClient, FinalError,
    OperationType, Outcome,
};
use telemetry::document::{document_id, history_id};
use telemetry::{Position, PositionOrder, StalenessPolicy};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

use super::encode::Encoder;
use super::high_water::HighWater;
use super::hold::Hold;
use super::refusal::{self, Refusal};
use super::stored::{read_query, read_stored};
use crate::config::NewestWins;
use crate::metrics::Metrics;
use crate::pipeline::Sink;
use crate::pipeline::reject::Rejects;
use crate::position::PositionWrite;

mod history;
mod parked;

use history::HistoryDoc;
use parked::Parked;

/// Rounds of Patch/Create (or Read/Replace/Create) a position may take before it is
/// counted as failed. A conflict (409, 412) means another write of the same drone
/// succeeded meanwhile, so a position loses at most once to each other position of its
/// drone in flight (an ETag-mode conflict costs two rounds: the conflict and the read);
/// the bound sits well above that, so only a server that keeps contradicting itself
/// gets there.
const MAX_ROUNDS: u32 = 64;
/// Point reads in flight at once (ETag mode).
const MAX_READS: usize = 64;
/// Pause before reading again after a read failed for a reason that holds nothing (e.g.
/// an unreadable answer), so that such a failure does not spin.
const READ_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Settings of the sink.
#[derive(Debug, Clone)]
pub struct SinkSettings {
    /// How newest-wins is enforced.
    pub newest_wins: NewestWins,
    /// The staleness rule, re-applied to positions that must be retried.
    pub staleness: StalenessPolicy,
    /// Drones whose high-water mark is kept.
    pub high_water_capacity: usize,
    /// The bulk writer's settings. Its queue capacity is also the in-flight limit of the
    /// sink: positions (and history documents) from the moment the sink takes them until
    /// they are final, ETag-mode reads and parked writes included.
    pub bulk: BulkConfig,
    /// The account key's file (COSMOS_KEY_FILE), read again while Cosmos DB refuses the key.
    pub key_file: Option<PathBuf>,
}

/// How the write of a position not known superseded starts, from what the high-water
/// mark knows of its drone.
enum First {
    /// A drone this process has not written: Create (409, the document exists: go on as
    /// for a known drone), which saves the Patch answered 404 of a new document.
    Create,
    /// Patch mode, a known drone: the conditional Patch.
    Patch,
    /// ETag mode with the ETag this writer last wrote: Replace with `ifMatch`.
    Replace(String),
    /// ETag mode without an ETag: read the stored document first.
    Read,
}

/// Which operation of a position's write an outcome belongs to.
#[derive(Debug, Clone)]
enum Step {
    Patch,
    Create,
    Replace,
}

/// A position being written. Its document and patch are encoded when a step first
/// needs them, and kept for retries.
#[derive(Debug)]
struct Pending {
    position: Position,
    doc_id: String,
    order: PositionOrder,
    enqueued: Option<DateTime<Utc>>,
    received_at: Instant,
    latest: Option<Bytes>,
    patch: Option<Bytes>,
    /// The `ifMatch` of its Replace: kept, so that a Replace sent again stays conditional.
    if_match: Option<String>,
    /// Whether it is the hold's probe (its next answer tells whether the cause is gone).
    probe: bool,
    ack: crate::source::Ack,
    rounds: u32,
}

/// The context of one bulk operation.
#[derive(Debug)]
enum Ctx {
    Latest(Box<Pending>, Step),
    History(HistoryDoc),
}

/// How a position ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Final {
    Written,
    Superseded,
    /// Turned stale while retried or parked.
    StaleInRetry,
    /// Refused by the server for this document alone (the drop reason).
    Refused(&'static str),
    Failed,
}

/// State shared by the submitting side and the outcome task.
struct Shared {
    writer: BulkWriter<Ctx>,
    container: ContainerClient,
    encoder: Encoder,
    settings: SinkSettings,
    metrics: Arc<Metrics>,
    high_water: Mutex<HighWater>,
    in_flight: AtomicUsize,
    idle: Notify,
    /// The in-flight limit: one permit per position or history document not yet final.
    slots: Semaphore,
    reads: Semaphore,
    /// The query reading a stored document's order (ETag mode).
    read_query: String,
    hold: Arc<Hold<Parked>>,
    rejects: Rejects,
}

/// The sink. Feed it with [`CosmosSink::write`]; [`CosmosSink::close`] waits for every
/// position's final outcome.
pub struct CosmosSink {
    shared: Arc<Shared>,
    outcomes: JoinHandle<()>,
    supervisor: JoinHandle<()>,
}

impl std::fmt::Debug for CosmosSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CosmosSink")
            .field("in_flight", &self.shared.in_flight.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Drop for CosmosSink {
    /// A sink dropped without [`CosmosSink::close`] (the writer stopped while holding the
    /// stream) stops probing; what it parked is never acknowledged.
    fn drop(&mut self) {
        self.supervisor.abort();
    }
}

impl CosmosSink {
    /// Starts the sink's bulk writer, outcome task and hold supervisor on `container`;
    /// documents Cosmos DB refuses go to `rejects`.
    pub fn start(
        container: ContainerClient,
        encoder: Encoder,
        settings: SinkSettings,
        metrics: Arc<Metrics>,
        rejects: Rejects,
    ) -> CosmosSink {
        let (writer, outcomes) = container.bulk_writer::<Ctx>(settings.bulk.clone());
        let hold = Arc::new(Hold::new(metrics.clone()));
        let shared = Arc::new(Shared {
            writer,
            container,
            high_water: Mutex::new(HighWater::new(settings.high_water_capacity)),
            read_query: read_query(encoder.layout().partition_key_path()),
            encoder,
            slots: Semaphore::new(settings.bulk.queue_capacity.max(1)),
            settings,
            metrics,
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            reads: Semaphore::new(MAX_READS),
            hold: hold.clone(),
            rejects,
        });
        let outcomes = tokio::spawn(outcome_loop(shared.clone(), outcomes));
        let supervisor = tokio::spawn(hold.supervise(shared.clone()));
        CosmosSink {
            shared,
            outcomes,
            supervisor,
        }
    }

    /// Positions (and history documents) not yet final.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }

    /// Starts writing one coalesced position; waits while the stream is held or the
    /// in-flight limit is reached. A position that turned stale since the pipeline judged
    /// it (its batch waited while the stream was held) is dropped as `stale_in_retry`.
    pub async fn write(&self, item: PositionWrite) {
        let shared = &self.shared;
        shared.hold.wait_open().await;
        if !shared.is_fresh(&item.position, item.enqueued) {
            shared.metrics.dropped("stale_in_retry");
            if shared
                .encoder
                .history_document(&item.position, item.enqueued)
                .is_some()
            {
                shared.metrics.history_dropped("stale_in_retry");
            }
            return item.ack.finish();
        }
        let order = item.position.order();
        let first = {
            let mut hw = shared.high_water.lock().unwrap_or_else(|e| e.into_inner());
            match hw.get(&item.position.device_id) {
                // Not written by this process (or forgotten): most likely a new document.
                None => Some(First::Create),
                Some(mark) if order <= mark.order => None,
                Some(mark) => Some(match (shared.settings.newest_wins, &mark.etag) {
                    (NewestWins::Patch, _) => First::Patch,
                    (NewestWins::Etag, Some(etag)) => First::Replace(etag.clone()),
                    (NewestWins::Etag, None) => First::Read,
                }),
            }
        };
        let Some(first) = first else {
            return self.superseded(item).await;
        };
        let PositionWrite {
            position,
            enqueued,
            received_at,
            ack,
        } = item;
        if let Some(body) = shared.encoder.history_document(&position, enqueued) {
            self.write_history(&position, body, ack.clone()).await;
        }
        shared.enter().await;
        let mut pending = Box::new(Pending {
            doc_id: document_id(&position.device_id).into_owned(),
            position,
            order,
            enqueued,
            received_at,
            latest: None,
            patch: None,
            if_match: None,
            probe: false,
            ack,
            rounds: 0,
        });
        match first {
            First::Create => shared.submit(shared.op(pending, Step::Create)).await,
            First::Patch => shared.submit(shared.op(pending, Step::Patch)).await,
            First::Replace(etag) => {
                pending.if_match = Some(etag);
                shared.submit(shared.op(pending, Step::Replace)).await;
            }
            First::Read => shared.clone().read_then_write(pending),
        }
    }

    /// A fresh position known to be superseded (by a newer one of its batch, or by the
    /// high-water mark): counted; in history mode its history document is still written.
    pub async fn superseded(&self, item: PositionWrite) {
        self.shared.metrics.dropped("superseded");
        match self
            .shared
            .encoder
            .history_document(&item.position, item.enqueued)
        {
            Some(body) => self.write_history(&item.position, body, item.ack).await,
            None => item.ack.finish(),
        }
    }

    async fn write_history(
        &self,
        position: &telemetry::Position,
        body: Bytes,
        ack: crate::source::Ack,
    ) {
        let shared = &self.shared;
        shared.enter().await;
        let doc = HistoryDoc {
            device_id: position.device_id.clone(),
            id: history_id(&position.device_id, position.seq),
            body,
            device_time: position.ts,
            ack,
            probe: false,
        };
        shared.submit(shared.history_op(doc)).await;
    }

    /// Waits until every position written so far has its final outcome, then stops the
    /// bulk writer.
    pub async fn close(mut self) {
        self.shared.wait_idle().await;
        self.supervisor.abort();
        self.shared.writer.clone().close().await;
        let _ = (&mut self.outcomes).await;
    }

    /// Waits until nothing is in flight (everything submitted so far is final).
    pub async fn wait_idle(&self) {
        self.shared.wait_idle().await;
    }
}

impl Sink for CosmosSink {
    fn write(&self, write: PositionWrite) -> impl Future<Output = ()> + Send {
        CosmosSink::write(self, write)
    }

    fn superseded(&self, write: PositionWrite) -> impl Future<Output = ()> + Send {
        CosmosSink::superseded(self, write)
    }

    fn close(self) -> impl Future<Output = ()> + Send {
        CosmosSink::close(self)
    }
}

impl Shared {
    /// Takes a write in: waits while the stream is held and while the in-flight limit is
    /// reached.
    async fn enter(&self) {
        self.hold.wait_open().await;
        if let Ok(slot) = self.slots.acquire().await {
            slot.forget();
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.metrics.add_in_flight(1);
    }

    fn leave(&self) {
        self.metrics.add_in_flight(-1);
        let last = self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1;
        // After the count, so that in flight never reads above the limit.
        self.slots.add_permits(1);
        if last {
            self.idle.notify_waiters();
        }
    }

    async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The operation of `step` for a position; a Replace carries the position's `ifMatch`.
    fn op(&self, mut pending: Box<Pending>, step: Step) -> BulkOperation<Ctx> {
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

    async fn submit(&self, op: BulkOperation<Ctx>) {
        if let Err(closed) = self.writer.submit(op).await {
            // Only after close, which waits for idleness: abandon, the message comes again.
            tracing::error!("bulk writer closed with a write pending");
            drop(closed);
            self.leave();
        }
    }

    /// ETag mode: reads the stored document, then replaces, creates, or finds the
    /// position superseded.
    fn read_then_write(self: Arc<Self>, mut pending: Box<Pending>) {
        tokio::spawn(async move {
            pending.rounds += 1;
            if pending.rounds > MAX_ROUNDS {
                self.finish(*pending, Final::Failed, None);
                return;
            }
            let read = {
                let _permit = self.reads.acquire().await;
                let device = &pending.position.device_id;
                read_stored(&self.container, &self.read_query, device, &pending.doc_id).await
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
            match read {
                Ok(None) => {
                    let op = self.op(pending, Step::Create);
                    self.submit(op).await;
                }
                Ok(Some(stored)) if pending.order <= stored.order => {
                    self.high_water
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .raise(&pending.position.device_id, stored.order, stored.etag);
                    self.finish(*pending, Final::Superseded, None);
                }
                Ok(Some(stored)) => {
                    pending.if_match = stored.etag;
                    let op = self.op(pending, Step::Replace);
                    self.submit(op).await;
                }
                Err(err) => {
                    tracing::warn!(device = %pending.position.device_id, error = %err, "reading the stored document failed; retrying");
                    tokio::time::sleep(READ_RETRY_PAUSE).await;
                    self.retry_or_stale(pending, None).await;
                }
            }
        });
    }

    /// Whether a position is still fresh by the staleness rule.
    fn is_fresh(&self, position: &Position, enqueued: Option<DateTime<Utc>>) -> bool {
        self.settings
            .staleness
            .judge(Utc::now(), position.ts, enqueued)
            .is_fresh()
    }

    /// Submits a position again (the same step, a Replace with its `ifMatch`) unless it
    /// turned stale meanwhile; `false` when it did.
    async fn retry_or_stale(self: &Arc<Self>, pending: Box<Pending>, step: Option<Step>) -> bool {
        if !self.is_fresh(&pending.position, pending.enqueued) {
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
    fn finish(&self, mut pending: Pending, outcome: Final, etag: Option<String>) {
        self.answered(&mut pending.probe);
        match outcome {
            Final::Written => {
                self.metrics.written("latest");
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
            Final::Superseded => self.metrics.dropped("superseded"),
            Final::StaleInRetry => self.metrics.dropped("stale_in_retry"),
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
            Final::Failed => self.metrics.dropped("write_failed"),
        }
        pending.ack.finish();
        self.leave();
    }

    /// Handles one outcome of a latest-document operation.
    async fn on_latest(
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
        let kind = match step {
            Step::Patch => OperationType::Patch,
            Step::Create => OperationType::Create,
            Step::Replace => OperationType::Replace,
        };
        match refusal::of_outcome(kind, status, error.as_ref(), whole_request) {
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
        let etag_mode = self.settings.newest_wins == NewestWins::Etag;
        match (step, status) {
            (Step::Patch | Step::Replace, 200) | (Step::Create, 201) => {
                self.finish(*pending, Final::Written, etag);
            }
            (Step::Patch, 412) => self.finish(*pending, Final::Superseded, None),
            (Step::Patch | Step::Replace, 404) => {
                let op = self.op(pending, Step::Create);
                self.submit(op).await;
            }
            (Step::Replace, 412) | (Step::Create, 409) => {
                pending.rounds += 1;
                if pending.rounds > MAX_ROUNDS {
                    self.finish(*pending, Final::Failed, None);
                } else if etag_mode {
                    self.high_water
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .forget_etag(&pending.position.device_id);
                    self.clone().read_then_write(pending);
                } else {
                    let op = self.op(pending, Step::Patch);
                    self.submit(op).await;
                }
            }
            (step, status) => {
                tracing::error!(device = %pending.position.device_id, ?step, status, error = ?error, "write rejected by Cosmos DB; dropped");
                self.finish(*pending, Final::Failed, None);
            }
        }
    }
}

/// The fields of an outcome the state machine reads.
struct OutcomeInfo {
    status: u16,
    error: Option<FinalError>,
    etag: Option<String>,
    whole_request: bool,
}

async fn outcome_loop(shared: Arc<Shared>, mut outcomes: BulkOutcomes<Ctx>) {
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
        shared.metrics.cosmos_op(status, substatus);
        shared.metrics.request_units(&range_id, request_charge);
        let info = OutcomeInfo {
            status,
            error,
            etag,
            whole_request,
        };
        match context {
            Ctx::Latest(pending, step) => shared.on_latest(pending, step, info).await,
            Ctx::History(doc) => shared.on_history(doc, info).await,
        }
        if last_stats.elapsed() >= Duration::from_millis(500) {
            last_stats = Instant::now();
            publish_stats(&shared);
        }
    }
    publish_stats(&shared);
}

fn publish_stats(shared: &Shared) {
    for (range, stats) in shared.writer.stats().ranges {
        shared
            .metrics
            .set_throttled(&range, stats.throttled_operations);
    }
}

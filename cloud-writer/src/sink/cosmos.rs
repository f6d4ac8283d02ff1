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
//! Operations that ran out of retries (throttling, transient failures) are submitted
//! again while the position is not stale; a position that turns stale meanwhile is
//! dropped as stale. Every position ends written, superseded, stale or failed (counted),
//! and only then is its message acknowledged.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use cosmos::{
    BulkConfig, BulkOperation, BulkOutcomes, BulkWriter, ContainerClient, FinalError,
    OperationType, Outcome, QueryParameter, QueryRequest, QueryScope,
};
use telemetry::document::{document_id, history_id};
use telemetry::{Position, PositionOrder, StalenessPolicy};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

use super::encode::Encoder;
use super::high_water::HighWater;
use crate::config::NewestWins;
use crate::metrics::Metrics;
use crate::pipeline::PositionWrite;

/// Rounds of Patch/Create (or Read/Replace/Create) a position may take before it is
/// counted as failed. A conflict (409, 412) means another write of the same drone
/// succeeded meanwhile, so a position loses at most once to each other position of its
/// drone in flight (an ETag-mode conflict costs two rounds: the conflict and the read);
/// the bound sits well above that, so only a server that keeps contradicting itself
/// gets there.
const MAX_ROUNDS: u32 = 64;
/// Point reads in flight at once (ETag mode).
const MAX_READS: usize = 64;

/// Settings of the sink.
#[derive(Debug, Clone)]
pub struct SinkSettings {
    /// How newest-wins is enforced.
    pub newest_wins: NewestWins,
    /// The staleness rule, re-applied to positions that must be retried.
    pub staleness: StalenessPolicy,
    /// Drones whose high-water mark is kept.
    pub high_water_capacity: usize,
    /// The bulk writer's settings.
    pub bulk: BulkConfig,
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
    ack: crate::source::Ack,
    rounds: u32,
}

/// The context of one bulk operation.
#[derive(Debug)]
enum Ctx {
    Latest(Box<Pending>, Step),
    History {
        device_id: String,
        id: String,
        body: Bytes,
        device_time: DateTime<Utc>,
        ack: crate::source::Ack,
    },
}

/// How a position ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Final {
    Written,
    Superseded,
    Stale,
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
    reads: Semaphore,
    /// The query reading a stored document's order (ETag mode).
    read_query: String,
}

/// The sink. Feed it with [`CosmosSink::write`]; [`CosmosSink::close`] waits for every
/// position's final outcome.
pub struct CosmosSink {
    shared: Arc<Shared>,
    outcomes: JoinHandle<()>,
}

impl std::fmt::Debug for CosmosSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CosmosSink")
            .field("in_flight", &self.shared.in_flight.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl CosmosSink {
    /// Starts the sink's bulk writer and outcome task on `container`.
    pub fn start(
        container: ContainerClient,
        encoder: Encoder,
        settings: SinkSettings,
        metrics: Arc<Metrics>,
    ) -> CosmosSink {
        let (writer, outcomes) = container.bulk_writer::<Ctx>(settings.bulk.clone());
        let shared = Arc::new(Shared {
            writer,
            container,
            high_water: Mutex::new(HighWater::new(settings.high_water_capacity)),
            read_query: read_query(encoder.layout().partition_key_path()),
            encoder,
            settings,
            metrics,
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            reads: Semaphore::new(MAX_READS),
        });
        let outcomes = tokio::spawn(outcome_loop(shared.clone(), outcomes));
        CosmosSink { shared, outcomes }
    }

    /// Positions (and history documents) not yet final.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }

    /// Starts writing one coalesced position; waits while the bulk writer is full.
    pub async fn write(&self, item: PositionWrite) {
        let shared = &self.shared;
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
        let pending = Box::new(Pending {
            doc_id: document_id(&position.device_id).into_owned(),
            position,
            order,
            enqueued,
            received_at,
            latest: None,
            patch: None,
            ack,
            rounds: 0,
        });
        shared.enter();
        match first {
            First::Create => shared.submit(shared.op(pending, Step::Create, None)).await,
            First::Patch => shared.submit(shared.op(pending, Step::Patch, None)).await,
            First::Replace(etag) => {
                shared
                    .submit(shared.op(pending, Step::Replace, Some(etag)))
                    .await;
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
        shared.enter();
        let op = BulkOperation {
            kind: OperationType::Create,
            partition_key: shared.encoder.partition_key(&position.device_id),
            id: None,
            body: body.clone(),
            if_match: None,
            context: Ctx::History {
                device_id: position.device_id.clone(),
                id: history_id(&position.device_id, position.seq),
                body,
                device_time: position.ts,
                ack,
            },
        };
        shared.submit(op).await;
    }

    /// Waits until every position written so far has its final outcome, then stops the
    /// bulk writer.
    pub async fn close(self) {
        self.shared.wait_idle().await;
        self.shared.writer.clone().close().await;
        let _ = self.outcomes.await;
    }

    /// Waits until nothing is in flight (everything submitted so far is final).
    pub async fn wait_idle(&self) {
        self.shared.wait_idle().await;
    }
}

impl Shared {
    fn enter(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.metrics.add_in_flight(1);
    }

    fn leave(&self) {
        self.metrics.add_in_flight(-1);
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
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

    fn op(
        &self,
        mut pending: Box<Pending>,
        step: Step,
        etag: Option<String>,
    ) -> BulkOperation<Ctx> {
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
        BulkOperation {
            kind,
            partition_key: encoder.partition_key(&pending.position.device_id),
            id,
            body,
            if_match: etag,
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
                self.read_stored(&pending.position.device_id, &pending.doc_id)
                    .await
            };
            match read {
                Ok(None) => {
                    let op = self.op(pending, Step::Create, None);
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
                    let op = self.op(pending, Step::Replace, stored.etag);
                    self.submit(op).await;
                }
                Err(err) => {
                    tracing::warn!(device = %pending.position.device_id, error = %err, "reading the stored document failed; retrying");
                    self.retry_or_stale(pending, None).await;
                }
            }
        });
    }

    /// The stored document's order and ETag, by a query on its logical partition (a
    /// point read of a missing document fails on some servers instead of answering 404).
    async fn read_stored(
        &self,
        device_id: &str,
        doc_id: &str,
    ) -> Result<Option<Stored>, cosmos::CosmosError> {
        let query = QueryRequest {
            query: self.read_query.clone(),
            parameters: vec![
                QueryParameter {
                    name: "@id".into(),
                    value: doc_id.into(),
                },
                QueryParameter {
                    name: "@pk".into(),
                    value: device_id.into(),
                },
            ],
        };
        let response = self
            .container
            .query(&query, QueryScope::Partition(device_id.to_owned()))
            .await?;
        let Some(doc) = response.documents.into_iter().next() else {
            return Ok(None);
        };
        let stored: StoredOrder =
            serde_json::from_value(doc).map_err(|source| cosmos::CosmosError::Decode {
                what: "stored position",
                source,
            })?;
        Ok(Some(Stored {
            order: PositionOrder {
                device_time_ms: stored.device_time_ms,
                seq: stored.seq,
            },
            etag: stored.etag,
        }))
    }

    /// Submits a position again unless it turned stale meanwhile.
    async fn retry_or_stale(self: &Arc<Self>, pending: Box<Pending>, step: Option<Step>) {
        let now = Utc::now();
        let verdict = self
            .settings
            .staleness
            .judge(now, pending.position.ts, pending.enqueued);
        if !verdict.is_fresh() {
            self.finish(*pending, Final::Stale, None);
            return;
        }
        match (step, self.settings.newest_wins) {
            (Some(step), _) => {
                let op = self.op(pending, step, None);
                self.submit(op).await;
            }
            (None, NewestWins::Patch) => {
                let op = self.op(pending, Step::Patch, None);
                self.submit(op).await;
            }
            (None, NewestWins::Etag) => self.clone().read_then_write(pending),
        }
    }

    /// Records a position's final outcome and acknowledges its message.
    fn finish(&self, pending: Pending, outcome: Final, etag: Option<String>) {
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
            Final::Stale => self.metrics.dropped("stale"),
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
        } = outcome;
        if matches!(
            error,
            Some(
                FinalError::RetriesExhausted { .. }
                    | FinalError::Request(_)
                    | FinalError::Ranges(_)
            )
        ) {
            tracing::warn!(device = %pending.position.device_id, status, error = ?error, "write not done within its retry budget; submitting again");
            self.retry_or_stale(pending, Some(step)).await;
            return;
        }
        let etag_mode = self.settings.newest_wins == NewestWins::Etag;
        match (step, status) {
            (Step::Patch | Step::Replace, 200) | (Step::Create, 201) => {
                self.finish(*pending, Final::Written, etag);
            }
            (Step::Patch, 412) => self.finish(*pending, Final::Superseded, None),
            (Step::Patch | Step::Replace, 404) => {
                let op = self.op(pending, Step::Create, None);
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
                    let op = self.op(pending, Step::Patch, None);
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
}

/// The query of a stored document's order and ETag. It names the partition key in its
/// filter too: some servers refuse single-partition queries that do not.
fn read_query(pk_path: &telemetry::PartitionKeyPath) -> String {
    let mut pk = String::from("c");
    for segment in pk_path.segments() {
        if segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            pk.push('.');
            pk.push_str(segment);
        } else {
            pk.push_str(&format!("[{}]", serde_json::Value::from(segment.as_str())));
        }
    }
    format!("SELECT c.deviceTimeMs, c.seq, c._etag FROM c WHERE c.id = @id AND {pk} = @pk")
}

/// The order fields and ETag of a stored document.
#[derive(serde::Deserialize)]
struct StoredOrder {
    #[serde(rename = "deviceTimeMs")]
    device_time_ms: i64,
    seq: u64,
    #[serde(rename = "_etag")]
    etag: Option<String>,
}

/// What is stored for a drone.
struct Stored {
    order: PositionOrder,
    etag: Option<String>,
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
            ..
        } = outcome;
        shared.metrics.cosmos_op(status, substatus);
        shared.metrics.request_units(&range_id, request_charge);
        let info = OutcomeInfo {
            status,
            error,
            etag,
        };
        match context {
            Ctx::Latest(pending, step) => shared.on_latest(pending, step, info).await,
            Ctx::History {
                device_id,
                id,
                body,
                device_time,
                ack,
            } => {
                on_history(&shared, device_id, id, body, device_time, ack, info).await;
            }
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

async fn on_history(
    shared: &Arc<Shared>,
    device_id: String,
    id: String,
    body: Bytes,
    device_time: DateTime<Utc>,
    ack: crate::source::Ack,
    info: OutcomeInfo,
) {
    match (info.status, &info.error) {
        (200..=299, None) => shared.metrics.written("history"),
        // Already written (a replay): nothing to do.
        (409, _) => {}
        (
            _,
            Some(
                FinalError::RetriesExhausted { .. }
                | FinalError::Request(_)
                | FinalError::Ranges(_),
            ),
        ) if shared
            .settings
            .staleness
            .judge(Utc::now(), device_time, None)
            .is_fresh() =>
        {
            let op = BulkOperation {
                kind: OperationType::Create,
                partition_key: shared.encoder.partition_key(&device_id),
                id: None,
                body: body.clone(),
                if_match: None,
                context: Ctx::History {
                    device_id,
                    id,
                    body,
                    device_time,
                    ack,
                },
            };
            shared.submit(op).await;
            return;
        }
        (status, error) => {
            tracing::error!(id, status, ?error, "history document not written");
        }
    }
    ack.finish();
    shared.leave();
}

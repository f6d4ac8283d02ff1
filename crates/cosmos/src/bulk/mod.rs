//! The partition-aware bulk writer.
//!
//! Callers feed [`BulkOperation`]s to a [`BulkWriter`]; every operation's final outcome comes
//! back, exactly once, on the paired [`BulkOutcomes`]. Inside, one dispatcher task routes each
//! operation to its partition key range (EPK computed once, binary search over the range map),
//! cuts per-range batches of up to 100 operations or about 220 KB, sends a batch when it is
//! full or its oldest operation has waited the flush interval, and keeps per range an AIMD
//! concurrency limit. Batches are non-atomic range-targeted bulk requests; each operation's
//! result is checked: throttled (429), moved (410/1002, 1007, 1008), and transient (449, 408,
//! 503, timeouts) operations are retried within the retry budget, anything else is final.
//!
//! Memory is bounded: at most `queue_capacity` operations are inside the writer (queued, in
//! flight, or waiting for a retry); `submit` waits for room. Outcomes themselves are small and
//! queue without bound until read.

mod aimd;
mod batch;
mod dispatcher;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cosmos_wire::batch::{BatchBody, OperationRef, OperationType, TARGET_BODY_BYTES};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::retry::RetryPolicy;
use crate::{ContainerClient, CosmosError, PartitionKey};

/// Settings of a bulk writer.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkConfig {
    /// Most operations per batch request (at most 100, the service's limit).
    pub max_operations: usize,
    /// Body size at which a batch is closed (the SDKs use 220,201 bytes; at most 2 MB).
    pub target_bytes: usize,
    /// How long a batch that is not full may wait for more operations before it leaves.
    pub flush_interval: Duration,
    /// Cap of the batches in flight per range.
    pub max_concurrency_per_range: usize,
    /// Batches in flight per range at the start (the AIMD controller grows it).
    pub initial_concurrency: usize,
    /// Retry budget and backoff of each operation.
    pub retry: RetryPolicy,
    /// Most operations inside the writer at once (queued, in flight or awaiting a retry).
    pub queue_capacity: usize,
    /// Time limit of one batch request.
    pub request_timeout: Duration,
}

impl Default for BulkConfig {
    fn default() -> Self {
        Self {
            max_operations: cosmos_wire::batch::MAX_OPERATIONS,
            target_bytes: TARGET_BODY_BYTES,
            flush_interval: Duration::from_millis(10),
            max_concurrency_per_range: 20,
            initial_concurrency: 1,
            retry: RetryPolicy::default(),
            queue_capacity: 20_000,
            request_timeout: Duration::from_secs(10),
        }
    }
}

impl BulkConfig {
    /// Checks the settings; the error says which one to fix.
    pub fn validate(&self) -> Result<(), CosmosError> {
        let fail = |m: &str| Err(CosmosError::Config(m.to_string()));
        if !(1..=cosmos_wire::batch::MAX_OPERATIONS).contains(&self.max_operations) {
            return fail("bulk max_operations must be between 1 and 100");
        }
        if !(1..=cosmos_wire::batch::MAX_BODY_BYTES).contains(&self.target_bytes) {
            return fail("bulk target_bytes must be between 1 and 2 MiB");
        }
        if self.max_concurrency_per_range == 0 || self.initial_concurrency == 0 {
            return fail("bulk concurrency settings must be at least 1");
        }
        if self.queue_capacity < self.max_operations {
            return fail("bulk queue_capacity must hold at least one full batch");
        }
        if self.retry.max_attempts == 0 {
            return fail("bulk retry.max_attempts must be at least 1");
        }
        if self.request_timeout.is_zero() {
            return fail("bulk request_timeout must be positive");
        }
        Ok(())
    }
}

/// One operation for the bulk writer.
#[derive(Debug, Clone)]
pub struct BulkOperation<T> {
    /// Create, Upsert, Replace, Patch, Delete (or Read).
    pub kind: OperationType,
    /// The partition key value (a string converts with `.into()`).
    pub partition_key: PartitionKey,
    /// The document id: required for Replace, Patch, Delete and Read.
    pub id: Option<String>,
    /// The serialized document (Create, Upsert, Replace) or patch request (Patch,
    /// `{"operations":[...],"condition":"from c where ..."}`); empty for Delete and Read.
    pub body: Bytes,
    /// ETag precondition.
    pub if_match: Option<String>,
    /// The caller's value, handed back with the outcome.
    pub context: T,
}

/// Why an operation failed for good.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FinalError {
    /// The service answered with a status that retrying does not change (400, 404, 409,
    /// 412, 413, ...); the outcome's status says which.
    #[error("rejected by the service")]
    Rejected,
    /// The operation failed transiently until its retry budget ran out; the outcome carries
    /// the last status (0 if the last attempt got no answer).
    #[error("retries exhausted after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The request failed without an answer and could not be retried.
    #[error("request failed: {0}")]
    Request(String),
    /// The operation was malformed: it lacks the id it needs (never sent), or its body is not
    /// valid JSON (found when the service refused the batch carrying it).
    #[error("invalid operation: {0}")]
    Invalid(String),
    /// The partition key ranges of the container could not be read.
    #[error("cannot read the partition key ranges: {0}")]
    Ranges(String),
}

/// The final outcome of one operation.
#[derive(Debug, Clone)]
pub struct Outcome<T> {
    /// The caller's value from [`BulkOperation::context`].
    pub context: T,
    /// The operation's last HTTP status (0 if it never got an answer).
    pub status: u16,
    /// Its substatus.
    pub substatus: u32,
    /// RU charged for it over all attempts.
    pub request_charge: f64,
    /// Attempts made.
    pub attempts: u32,
    /// The document's ETag after a successful write.
    pub etag: Option<String>,
    /// The partition key range of its last attempt.
    pub range_id: String,
    /// Why it failed; `None` on success.
    pub error: Option<FinalError>,
    /// Whether `status` answered the whole batch request (or the range map read) rather than
    /// this operation alone: a 404 then means the container is missing, not the document, and
    /// a 400 that the request was refused (e.g. an operation type the server does not
    /// support in batches).
    pub whole_request: bool,
}

impl<T> Outcome<T> {
    /// Whether the operation succeeded (2xx).
    pub fn is_success(&self) -> bool {
        self.error.is_none() && (200..300).contains(&self.status)
    }
}

/// RU and request counts of one partition key range (one cell of the heat map).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeStats {
    /// RU charged.
    pub request_charge: f64,
    /// Batch requests sent.
    pub batches: u64,
    /// Operation attempts sent (retries counted again).
    pub operations: u64,
    /// Batch requests that were throttled as a whole or held a throttled operation.
    pub throttled_batches: u64,
    /// Operation attempts answered 429.
    pub throttled_operations: u64,
    /// Batch requests that failed transiently as a whole (503, 408, 449, timeout, 410).
    pub failed_batches: u64,
    /// The range's current concurrency limit.
    pub concurrency: usize,
}

impl RangeStats {
    fn add(&mut self, other: &RangeStats) {
        self.request_charge += other.request_charge;
        self.batches += other.batches;
        self.operations += other.operations;
        self.throttled_batches += other.throttled_batches;
        self.throttled_operations += other.throttled_operations;
        self.failed_batches += other.failed_batches;
        self.concurrency += other.concurrency;
    }
}

/// A snapshot of a bulk writer's accounting.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BulkStats {
    /// Per range id (ranges that split away stay listed).
    pub ranges: BTreeMap<String, RangeStats>,
    /// Sums over all ranges.
    pub total: RangeStats,
    /// Operations accepted by `submit`.
    pub submitted: u64,
    /// Operations that ended with a 2xx.
    pub succeeded: u64,
    /// Operations that ended otherwise.
    pub failed: u64,
    /// Operation attempts beyond the first.
    pub retries: u64,
    /// Range map refreshes after a split or move.
    pub range_refreshes: u64,
}

/// Accounting shared by the writer handles, the dispatcher and the batch tasks: updated once
/// per batch under the lock, and per operation (submissions) without it.
#[derive(Debug, Default)]
struct StatsCell {
    stats: Mutex<BulkStats>,
    submitted: AtomicU64,
}

impl StatsCell {
    fn update(&self, f: impl FnOnce(&mut BulkStats)) {
        f(&mut self.stats.lock().expect("stats lock is never poisoned"));
    }

    fn count_submitted(&self) {
        self.submitted.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> BulkStats {
        let mut stats = self
            .stats
            .lock()
            .expect("stats lock is never poisoned")
            .clone();
        stats.submitted = self.submitted.load(Ordering::Relaxed);
        let mut total = RangeStats::default();
        for range in stats.ranges.values() {
            total.add(range);
        }
        stats.total = total;
        stats
    }
}

/// An operation inside the writer.
struct PendingOp<T> {
    kind: OperationType,
    partition_key: PartitionKey,
    /// The partition key as the JSON array batches carry.
    pk_json: String,
    id: Option<String>,
    body: Option<Bytes>,
    if_match: Option<String>,
    epk: u128,
    /// Upper bound of its share of a batch body.
    size: usize,
    context: T,
    attempts: u32,
    /// Failed attempts other than throttled ones.
    failures: u32,
    request_charge: f64,
    /// When it was first sent.
    first_sent: Option<Instant>,
    /// When it last entered a range queue (the flush timer starts there).
    queued_at: Instant,
    _permit: OwnedSemaphorePermit,
}

impl<T> PendingOp<T> {
    fn as_ref(&self) -> OperationRef<'_> {
        OperationRef {
            operation_type: self.kind,
            partition_key: &self.pk_json,
            id: self.id.as_deref(),
            resource_body: self.body.as_deref(),
            if_match: self.if_match.as_deref(),
        }
    }

    fn into_outcome(
        self,
        status: u16,
        substatus: u32,
        etag: Option<String>,
        range_id: &str,
        error: Option<FinalError>,
        whole_request: bool,
    ) -> Outcome<T> {
        Outcome {
            context: self.context,
            status,
            substatus,
            request_charge: self.request_charge,
            attempts: self.attempts,
            etag,
            range_id: range_id.to_string(),
            error,
            whole_request,
        }
    }
}

enum Msg<T> {
    /// An operation to route.
    Op(PendingOp<T>),
    /// A malformed operation's outcome, passed through so outcomes keep one sender.
    Invalid(Outcome<T>),
    /// Stop accepting operations and finish.
    Close,
}

/// The error of [`BulkWriter::submit`] after the writer was closed; it hands the operation back.
pub struct BulkClosed<T>(pub BulkOperation<T>);

impl<T> fmt::Debug for BulkClosed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BulkClosed(..)")
    }
}

impl<T> fmt::Display for BulkClosed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the bulk writer is closed")
    }
}

impl<T> std::error::Error for BulkClosed<T> {}

/// The feeding end of a bulk writer. Clones feed the same writer.
pub struct BulkWriter<T> {
    tx: mpsc::UnboundedSender<Msg<T>>,
    permits: Arc<Semaphore>,
    stats: Arc<StatsCell>,
    done: watch::Receiver<bool>,
}

impl<T> Clone for BulkWriter<T> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            permits: self.permits.clone(),
            stats: self.stats.clone(),
            done: self.done.clone(),
        }
    }
}

impl<T> fmt::Debug for BulkWriter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkWriter")
            .field("free_capacity", &self.permits.available_permits())
            .finish()
    }
}

/// Why an operation cannot be sent; `None` if it names the id it needs. Its body is checked
/// only when a batch holding it is refused as a whole (see [`malformed_body`]): checking every
/// document up front would parse each one more time on the hot path.
fn malformed<T>(op: &BulkOperation<T>) -> Option<String> {
    use OperationType::*;
    let needs_id = matches!(op.kind, Replace | Patch | Delete | Read);
    if needs_id && op.id.is_none() {
        return Some(format!("{} needs an id", op.kind.as_str()));
    }
    None
}

/// Why an operation's body cannot be sent: a document or patch request that is not valid JSON
/// makes the service refuse the whole batch it travels in.
fn malformed_body(kind: OperationType, body: Option<&[u8]>) -> Option<String> {
    use OperationType::*;
    let needs_body = matches!(kind, Create | Upsert | Replace | Patch);
    let valid = |b: &[u8]| serde_json::from_slice::<serde::de::IgnoredAny>(b).is_ok();
    (needs_body && !body.is_some_and(valid))
        .then(|| format!("the body of {} is not valid JSON", kind.as_str()))
}

impl<T: Send + 'static> BulkWriter<T> {
    /// Hands an operation to the writer, waiting while the writer is full. Its outcome comes
    /// on the [`BulkOutcomes`]; an operation without the id it needs gets an outcome with
    /// [`FinalError::Invalid`] at once, one whose body is not valid JSON gets it when the
    /// batch carrying it is refused (the batch's other operations are sent again). Fails only
    /// once the writer is closed.
    pub async fn submit(&self, op: BulkOperation<T>) -> Result<(), BulkClosed<T>> {
        if let Some(reason) = malformed(&op) {
            let BulkOperation {
                kind,
                partition_key,
                id,
                body,
                if_match,
                context,
            } = op;
            let outcome = Outcome {
                context,
                status: 400,
                substatus: 0,
                request_charge: 0.0,
                attempts: 0,
                etag: None,
                range_id: String::new(),
                error: Some(FinalError::Invalid(reason)),
                whole_request: false,
            };
            return match self.tx.send(Msg::Invalid(outcome)) {
                Ok(()) => {
                    self.stats.count_submitted();
                    self.stats.update(|s| s.failed += 1);
                    Ok(())
                }
                Err(mpsc::error::SendError(Msg::Invalid(outcome))) => {
                    Err(BulkClosed(BulkOperation {
                        kind,
                        partition_key,
                        id,
                        body,
                        if_match,
                        context: outcome.context,
                    }))
                }
                Err(_) => unreachable!("the message sent is handed back"),
            };
        }
        let permit = match self.permits.clone().acquire_owned().await {
            Ok(permit) => permit,
            Err(_) => return Err(BulkClosed(op)),
        };
        let pk_json = op.partition_key.to_json();
        let has_body = !matches!(op.kind, OperationType::Delete | OperationType::Read);
        let mut pending = PendingOp {
            kind: op.kind,
            epk: op.partition_key.epk(),
            partition_key: op.partition_key,
            pk_json,
            id: op.id,
            body: has_body.then_some(op.body),
            if_match: op.if_match,
            size: 0,
            context: op.context,
            attempts: 0,
            failures: 0,
            request_charge: 0.0,
            first_sent: None,
            queued_at: Instant::now(),
            _permit: permit,
        };
        pending.size = BatchBody::encoded_len(&pending.as_ref());
        match self.tx.send(Msg::Op(pending)) {
            Ok(()) => {
                self.stats.count_submitted();
                Ok(())
            }
            Err(mpsc::error::SendError(Msg::Op(p))) => Err(BulkClosed(BulkOperation {
                kind: p.kind,
                partition_key: p.partition_key,
                id: p.id,
                body: p.body.unwrap_or_default(),
                if_match: p.if_match,
                context: p.context,
            })),
            Err(_) => unreachable!("the message sent is handed back"),
        }
    }

    /// Stops accepting operations, sends everything still inside, and returns once every
    /// operation has its outcome; the outcome stream then ends. Other clones' `submit` fails
    /// from now on.
    pub async fn close(mut self) {
        let _ = self.tx.send(Msg::Close);
        drop(self.tx);
        // An error means the dispatcher is gone, which also means it is done.
        let _ = self.done.wait_for(|done| *done).await;
    }

    /// A snapshot of the accounting: RU, throttles, operations and batches per range and in
    /// total, and outcome counts.
    pub fn stats(&self) -> BulkStats {
        self.stats.snapshot()
    }
}

/// The receiving end of a bulk writer: one [`Outcome`] per submitted operation.
#[derive(Debug)]
pub struct BulkOutcomes<T> {
    rx: mpsc::UnboundedReceiver<Outcome<T>>,
}

impl<T> BulkOutcomes<T> {
    /// The next outcome; `None` once the writer is closed (or all its handles dropped) and
    /// every outcome was delivered.
    pub async fn next(&mut self) -> Option<Outcome<T>> {
        self.rx.recv().await
    }
}

impl ContainerClient {
    /// Starts a bulk writer on this container (spawns its dispatcher on the current tokio
    /// runtime). Settings out of range are clamped; call [`BulkConfig::validate`] first to
    /// reject them instead.
    pub fn bulk_writer<T: Send + 'static>(
        &self,
        config: BulkConfig,
    ) -> (BulkWriter<T>, BulkOutcomes<T>) {
        let config = clamp(config);
        let (tx, rx) = mpsc::unbounded_channel();
        let (outcome_tx, outcome_rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = watch::channel(false);
        let permits = Arc::new(Semaphore::new(config.queue_capacity));
        let stats = Arc::new(StatsCell::default());
        dispatcher::spawn(dispatcher::Parts {
            container: self.clone(),
            config,
            ops: rx,
            outcomes: outcome_tx,
            stats: stats.clone(),
            permits: permits.clone(),
            done: done_tx,
        });
        let writer = BulkWriter {
            tx,
            permits,
            stats,
            done: done_rx,
        };
        (writer, BulkOutcomes { rx: outcome_rx })
    }
}

fn clamp(mut c: BulkConfig) -> BulkConfig {
    c.max_operations = c
        .max_operations
        .clamp(1, cosmos_wire::batch::MAX_OPERATIONS);
    c.target_bytes = c.target_bytes.clamp(1, cosmos_wire::batch::MAX_BODY_BYTES);
    c.max_concurrency_per_range = c.max_concurrency_per_range.max(1);
    c.initial_concurrency = c.initial_concurrency.max(1);
    c.queue_capacity = c.queue_capacity.max(c.max_operations);
    c.retry.max_attempts = c.retry.max_attempts.max(1);
    if c.request_timeout.is_zero() {
        c.request_timeout = BulkConfig::default().request_timeout;
    }
    c
}

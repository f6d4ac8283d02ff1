//! One bulk batch request: writing its body, sending it to its partition key range, and
//! settling each operation: final outcomes go straight to the caller, operations to retry go
//! back to the dispatcher with what the range should do about them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cosmos_wire::batch::{BatchBody, parse_statuses};
use cosmos_wire::headers;
use cosmos_wire::status::{Disposition, disposition};
use reqwest::Method;
use tokio::sync::mpsc;

use super::{BulkConfig, FinalError, Outcome, PendingOp, RangeStats, StatsCell, malformed_body};
use crate::request::{RawResponse, RequestSpec};
use crate::{ContainerClient, CosmosError};

/// What the dispatcher and the batch tasks of one writer share: the container written to,
/// the settings, where final outcomes go, and the accounting.
pub(super) struct WriterContext<T> {
    pub container: ContainerClient,
    pub docs_path: String,
    pub config: BulkConfig,
    pub outcomes: mpsc::UnboundedSender<Outcome<T>>,
    pub stats: Arc<StatsCell>,
}

/// The result of one batch for the dispatcher.
pub(super) struct BatchDone<T> {
    /// The range the batch was sent to.
    pub range_id: Arc<str>,
    /// The range controller's generation when the batch left.
    pub generation: u64,
    /// Operations to send again on the same range.
    pub retry: Vec<PendingOp<T>>,
    /// Operations whose range moved: re-route them after a range map refresh.
    pub moved: Vec<PendingOp<T>>,
    /// Whether the request or any operation was throttled.
    pub throttled: bool,
    /// The longest retry-after the server asked for.
    pub retry_after: Option<Duration>,
    /// Whether the request or an operation failed transiently (not throttling).
    pub transient: bool,
    /// Operations of the batch.
    pub sent_ops: usize,
    /// Operations of the batch answered 429.
    pub throttled_ops: usize,
}

/// One answer that applies to an operation.
struct Answer<'a> {
    status: u16,
    substatus: u32,
    request_charge: f64,
    retry_after: Option<Duration>,
    etag: Option<String>,
    /// Why the request failed when there was no answer.
    failure: Option<&'a CosmosError>,
    /// Whether the answer was to the whole request, not to this operation.
    whole_request: bool,
}

impl<T: Send + 'static> WriterContext<T> {
    /// Sends one batch and settles its operations.
    pub async fn send_batch(
        &self,
        range_id: Arc<str>,
        generation: u64,
        mut ops: Vec<PendingOp<T>>,
    ) -> BatchDone<T> {
        let now = Instant::now();
        let mut body = BatchBody::with_capacity(ops.iter().map(|op| op.size).sum::<usize>() + 2);
        for op in &mut ops {
            op.attempts += 1;
            op.first_sent.get_or_insert(now);
            body.push(&op.as_ref());
        }
        let result = self.send(&range_id, body.finish()).await;
        let mut done = BatchDone {
            range_id,
            generation,
            retry: Vec::new(),
            moved: Vec::new(),
            throttled: false,
            retry_after: None,
            transient: false,
            sent_ops: ops.len(),
            throttled_ops: 0,
        };
        let mut stats = RangeStats {
            batches: 1,
            operations: ops.len() as u64,
            ..RangeStats::default()
        };
        let (mut succeeded, mut failed) = (0u64, 0u64);
        let retries: u64 = ops.iter().filter(|op| op.attempts > 1).count() as u64;
        let whole_failed = !matches!(&result, Ok(r) if matches!(r.status, 200 | 207 | 429));

        match result {
            Ok(response) if matches!(response.status, 200 | 207) => {
                stats.request_charge = response.request_charge;
                match parse_statuses(&response.body) {
                    Ok(results) if results.len() == ops.len() => {
                        let header_charge = response.request_charge;
                        let mut sum = 0.0;
                        for (op, r) in ops.into_iter().zip(results) {
                            sum += r.request_charge;
                            stats.throttled_operations += u64::from(r.status_code == 429);
                            let answer = Answer {
                                status: r.status_code,
                                substatus: r.sub_status_code,
                                request_charge: r.request_charge,
                                retry_after: r.retry_after_milliseconds.map(Duration::from_millis),
                                etag: r.e_tag,
                                failure: None,
                                whole_request: false,
                            };
                            match self.settle(op, answer, &mut done) {
                                Some(true) => succeeded += 1,
                                Some(false) => failed += 1,
                                None => {}
                            }
                        }
                        if header_charge == 0.0 {
                            stats.request_charge = sum;
                        }
                    }
                    parsed => {
                        let message = match parsed {
                            Ok(results) => format!(
                                "batch of {} operations answered with {} results",
                                ops.len(),
                                results.len()
                            ),
                            Err(e) => format!("unreadable batch response: {e}"),
                        };
                        let error = CosmosError::Protocol(message);
                        failed += ops.len() as u64;
                        self.fail_all(ops, &done.range_id, &error, response.status);
                    }
                }
            }
            Ok(response)
                if response.status != 429
                    && ops
                        .iter()
                        .any(|op| malformed_body(op.kind, op.body.as_deref()).is_some()) =>
            {
                // Refused as a whole (400, or 500 from some emulators) because of operations
                // the service cannot read: they fail alone, the others are sent again.
                stats.request_charge = response.request_charge;
                for op in ops {
                    match malformed_body(op.kind, op.body.as_deref()) {
                        Some(reason) => {
                            failed += 1;
                            let error = Some(FinalError::Invalid(reason));
                            let range_id = &done.range_id;
                            self.emit(op.into_outcome(
                                response.status,
                                0,
                                None,
                                range_id,
                                error,
                                false,
                            ));
                        }
                        None => done.retry.push(op),
                    }
                }
            }
            Ok(response) => {
                // The request failed as a whole: every operation shares its answer.
                stats.request_charge = response.request_charge;
                if response.status == 429 {
                    stats.throttled_operations = ops.len() as u64;
                }
                let error = response.to_error();
                let share = response.request_charge / ops.len().max(1) as f64;
                for op in ops {
                    let answer = Answer {
                        status: response.status,
                        substatus: response.substatus,
                        request_charge: share,
                        retry_after: response.retry_after,
                        etag: None,
                        failure: Some(&error),
                        whole_request: true,
                    };
                    match self.settle(op, answer, &mut done) {
                        Some(true) => succeeded += 1,
                        Some(false) => failed += 1,
                        None => {}
                    }
                }
            }
            Err(error) => {
                for op in ops {
                    let answer = Answer {
                        status: 0,
                        substatus: 0,
                        request_charge: 0.0,
                        retry_after: None,
                        etag: None,
                        failure: Some(&error),
                        whole_request: true,
                    };
                    if self.settle(op, answer, &mut done).is_some() {
                        failed += 1;
                    }
                }
            }
        }
        stats.throttled_batches = u64::from(done.throttled);
        stats.failed_batches = u64::from(whole_failed);
        self.stats.update(|s| {
            s.ranges
                .entry(done.range_id.to_string())
                .or_default()
                .add(&stats);
            s.succeeded += succeeded;
            s.failed += failed;
            s.retries += retries;
        });
        done
    }

    async fn send(&self, range_id: &str, body: Vec<u8>) -> Result<RawResponse, CosmosError> {
        let spec = RequestSpec::new(Method::POST, self.docs_path.clone())
            .header(headers::IS_BATCH_REQUEST, "True")?
            .header(headers::BATCH_ATOMIC, "False")?
            .header(headers::BATCH_CONTINUE_ON_ERROR, "True")?
            .header(headers::PARTITION_KEY_RANGE_ID, range_id)?
            // Outcomes carry status, RU and ETag, never the document: skip sending it back.
            .header("prefer", "return=minimal")?
            .body(body)
            .timeout(self.config.request_timeout);
        self.container.client().send(&spec).await
    }

    /// Settles one operation: a final outcome (`Some(success)`) or a retry (`None`).
    fn settle(
        &self,
        mut op: PendingOp<T>,
        answer: Answer<'_>,
        done: &mut BatchDone<T>,
    ) -> Option<bool> {
        op.request_charge += answer.request_charge;
        let kind = match answer.failure {
            Some(error) if answer.status == 0 => error.disposition(),
            _ => disposition(answer.status, answer.substatus),
        };
        let range_id = &done.range_id;
        match kind {
            Disposition::Success => return self.emit_final(op, answer, range_id, None),
            Disposition::Permanent => {
                let error = match answer.failure {
                    Some(e) if answer.status == 0 => FinalError::Request(e.to_string()),
                    _ => FinalError::Rejected,
                };
                return self.emit_final(op, answer, range_id, Some(error));
            }
            _ => {}
        }
        if kind == Disposition::Throttled {
            done.throttled_ops += 1;
        } else {
            op.failures += 1;
        }
        let elapsed = op.first_sent.map_or(Duration::ZERO, |t| t.elapsed());
        if !self.config.retry.allows_retry(kind, op.failures, elapsed) {
            let last = match answer.failure {
                Some(e) if answer.status == 0 => e.to_string(),
                _ => format!("status {} substatus {}", answer.status, answer.substatus),
            };
            let error = FinalError::RetriesExhausted {
                attempts: op.attempts,
                last,
            };
            return self.emit_final(op, answer, range_id, Some(error));
        }
        match kind {
            Disposition::Throttled => {
                done.throttled = true;
                done.retry_after = done.retry_after.max(answer.retry_after);
                done.retry.push(op);
            }
            Disposition::RangeGone => done.moved.push(op),
            _ => {
                done.transient = true;
                done.retry.push(op);
            }
        }
        None
    }

    fn fail_all(&self, ops: Vec<PendingOp<T>>, range_id: &str, error: &CosmosError, status: u16) {
        for op in ops {
            let outcome = op.into_outcome(
                status,
                0,
                None,
                range_id,
                Some(FinalError::Request(error.to_string())),
                true,
            );
            self.emit(outcome);
        }
    }

    /// Emits an operation's final outcome: written with the answer's ETag (no `error`), or
    /// failed; `Some(success)` as [`Self::settle`] returns it.
    fn emit_final(
        &self,
        op: PendingOp<T>,
        answer: Answer<'_>,
        range_id: &str,
        error: Option<FinalError>,
    ) -> Option<bool> {
        let success = error.is_none();
        let etag = if success { answer.etag } else { None };
        self.emit(op.into_outcome(
            answer.status,
            answer.substatus,
            etag,
            range_id,
            error,
            answer.whole_request,
        ));
        Some(success)
    }

    /// Hands a final outcome to the caller (who may have stopped listening).
    pub fn emit(&self, outcome: Outcome<T>) {
        let _ = self.outcomes.send(outcome);
    }
}

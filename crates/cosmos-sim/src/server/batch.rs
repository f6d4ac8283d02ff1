//! Batches (`POST .../docs` with `x-ms-cosmos-is-batch-request`): the body read without parsing
//! its documents, each operation addressed, then either all-or-nothing on one logical partition
//! (transactional) or in order on one range (bulk), and the per-operation results written as
//! the service writes them.

use super::headers::{header, header_pk, is_minimal, is_true};
use super::operation::{address, op_kind, range_by_id};
use super::reply::Reply;
use crate::document_ops::{Addressed, Ctx, Outcome, Preconditions};
use crate::endpoint_state::EndpointState;
use crate::raw::{self, BatchError, BatchOp, Invalid};
use crate::ru;
use crate::store::{PartitionKey, Range, Ranges};
use cosmos_wire::batch::{MAX_BODY_BYTES, MAX_OPERATIONS, OperationType};
use cosmos_wire::headers as h;
use cosmos_wire::status::{SUB_PARTITION_KEY_RANGE_GONE, SUB_RU_BUDGET_EXCEEDED};
use http::HeaderMap;
use std::sync::Arc;

/// Each operation of a batch: its kind, and itself or the outcome that refused it unaddressed.
type AddressedOps<'a> = Vec<(OperationType, Result<Addressed<'a>, Outcome>)>;

/// Serves one batch request.
pub(super) fn batch(
    state: &EndpointState,
    ctx: &Ctx<'_>,
    headers: &HeaderMap,
    body: &[u8],
) -> Reply {
    let ops = match read_operations(ctx, body) {
        Ok(ops) => ops,
        Err(r) => return r,
    };
    let header_pk = match header_pk(headers) {
        Ok(pk) => pk,
        Err(r) => return r,
    };
    let atomic = !header(headers, h::BATCH_ATOMIC).is_some_and(|v| v.eq_ignore_ascii_case("false"));
    let continue_on_error = is_true(headers, h::BATCH_CONTINUE_ON_ERROR);
    let minimal = is_minimal(headers);
    count_operations(state, &ops);
    let addressed: AddressedOps<'_> = ops
        .into_iter()
        .map(|op| (op.operation_type, address_operation(ctx, op, &header_pk)))
        .collect();
    let ranges = ctx.container.ranges.read();
    let (outcomes, status) = if atomic {
        let Some(pk) = header_pk else {
            return Reply::error(
                400,
                0,
                "A transactional batch needs the partition key header.",
            );
        };
        transactional(ctx, &ranges, &pk, addressed)
    } else {
        let range = match (header(headers, h::PARTITION_KEY_RANGE_ID), &header_pk) {
            (Some(id), _) => match range_by_id(ctx.container, id) {
                Ok(r) => r,
                Err(reply) => return reply,
            },
            (None, Some(pk)) => ranges.for_epk(pk.epk),
            (None, None) => {
                return Reply::error(
                    400,
                    0,
                    "A non-atomic batch needs x-ms-documentdb-partitionkeyrangeid or the partition key header.",
                );
            }
        };
        in_order(ctx, &range, addressed, continue_on_error)
    };
    drop(ranges);
    respond(&outcomes, status, minimal, body.len())
}

/// Reads the body's operations (1 to [`MAX_OPERATIONS`], at most [`MAX_BODY_BYTES`]).
fn read_operations<'a>(ctx: &Ctx<'_>, body: &'a [u8]) -> Result<Vec<BatchOp<'a>>, Reply> {
    if body.len() > MAX_BODY_BYTES {
        return Err(Reply::error(
            413,
            0,
            format!(
                "The batch request body is {} bytes; at most {MAX_BODY_BYTES}.",
                body.len()
            ),
        ));
    }
    let text = std::str::from_utf8(body).map_err(|e| BatchError::from(Invalid(e.valid_up_to())));
    let ops = text
        .and_then(|t| raw::read_batch(t, &ctx.container.pk_path))
        .map_err(|e| {
            Reply::error(
                400,
                0,
                format!("The batch body is not a JSON array of operations: {e}"),
            )
        })?;
    if ops.is_empty() || ops.len() > MAX_OPERATIONS {
        return Err(Reply::error(
            400,
            0,
            format!(
                "A batch holds 1 to {MAX_OPERATIONS} operations, not {}.",
                ops.len()
            ),
        ));
    }
    Ok(ops)
}

/// Counts the batch's operations by kind.
fn count_operations(state: &EndpointState, ops: &[BatchOp<'_>]) {
    let mut counts: [u64; 6] = [0; 6];
    for op in ops {
        counts[op.operation_type as usize] += 1;
    }
    for kind in [
        OperationType::Create,
        OperationType::Upsert,
        OperationType::Read,
        OperationType::Delete,
        OperationType::Replace,
        OperationType::Patch,
    ] {
        let n = counts[kind as usize];
        if n > 0 {
            state.counters.operations(op_kind(kind), n);
        }
    }
}

/// One batch operation addressed: its own partition key, or else the header's.
fn address_operation<'a>(
    ctx: &Ctx<'_>,
    op: BatchOp<'a>,
    header_pk: &Option<PartitionKey>,
) -> Result<Addressed<'a>, Outcome> {
    let pk = match op.partition_key {
        Some(raw) => match batch_operation_key(raw) {
            Some(pk) => Some(pk),
            None => {
                return Err(Outcome::error(
                    400,
                    0,
                    0.0,
                    format!("invalid partitionKey {}", String::from_utf8_lossy(raw)),
                ));
            }
        },
        None => header_pk.clone(),
    };
    let pre = Preconditions {
        if_match: op.if_match,
        if_none_match: op.if_none_match,
    };
    address(
        ctx,
        op.operation_type,
        op.id.as_deref(),
        pk,
        op.resource_body,
        pre,
    )
}

/// A transactional batch: every operation on the header's logical partition, all or nothing.
/// The first operation that cannot be addressed, or names another key, fails the batch with
/// its own status; the others get 424.
fn transactional(
    ctx: &Ctx<'_>,
    ranges: &Ranges,
    pk: &PartitionKey,
    addressed: AddressedOps<'_>,
) -> (Vec<Outcome>, u16) {
    if let Some(i) = addressed
        .iter()
        .position(|(_, a)| a.as_ref().map_or(true, |a| a.pk != *pk))
    {
        let fail = match &addressed[i].1 {
            Err(o) => o.clone(),
            Ok(_) => Outcome::error(
                400,
                1001,
                0.0,
                "All operations of a transactional batch must have the batch's partition key.",
            ),
        };
        let status = fail.status;
        let outcomes = (0..addressed.len())
            .map(|j| {
                if j == i {
                    fail.clone()
                } else {
                    Outcome::error(424, 0, 0.0, "Failed dependency.")
                }
            })
            .collect();
        return (outcomes, status);
    }
    let ops: Vec<Addressed<'_>> = addressed.into_iter().filter_map(|(_, a)| a.ok()).collect();
    let range = ranges.for_epk(pk.epk);
    ctx.execute_atomic(&mut range.part.lock(), ops)
}

/// A bulk batch on one range: each operation in order. After a 429 the rest are throttled
/// too; after another failure the rest get 424 unless `continue_on_error`; an operation whose
/// key is not in the range gets 410/1002.
fn in_order(
    ctx: &Ctx<'_>,
    range: &Arc<Range>,
    addressed: AddressedOps<'_>,
    continue_on_error: bool,
) -> (Vec<Outcome>, u16) {
    let mut part = range.part.lock();
    let mut throttled = None;
    let mut stop = false;
    let outcomes: Vec<Outcome> = addressed
        .into_iter()
        .map(|(_, a)| {
            if stop {
                return Outcome::error(
                    424,
                    0,
                    0.0,
                    "Failed dependency: an earlier operation failed.",
                );
            }
            if let Some(wait) = throttled {
                part.counters.throttle(ctx.priority);
                return Outcome::throttled(wait);
            }
            let o = match a {
                Err(o) => o,
                Ok(a) if !range.contains(a.pk.epk) => Outcome::error(
                    410,
                    SUB_PARTITION_KEY_RANGE_GONE,
                    0.0,
                    format!(
                        "The partition key of {:?} is not in range {}: refresh the range map.",
                        a.id, range.id
                    ),
                ),
                Ok(a) => ctx.execute(&mut part, a),
            };
            if o.status == 429 {
                throttled = o.retry_after;
            }
            if !o.is_success() && o.status != 429 && !continue_on_error {
                stop = true;
            }
            o
        })
        .collect();
    let status = if outcomes.iter().all(Outcome::is_success) {
        200
    } else {
        207
    };
    (outcomes, status)
}

/// The batch response: the results, the summed charge, and on 429 the retry-after.
fn respond(outcomes: &[Outcome], status: u16, minimal: bool, body_len: usize) -> Reply {
    let charge: f64 = outcomes.iter().map(|o| o.charge).sum();
    let mut out = Vec::with_capacity(
        outcomes.len() * 96
            + if minimal {
                0
            } else {
                body_len + outcomes.len() * 160
            },
    );
    write_results(outcomes, minimal, &mut out);
    let mut reply = Reply::json(status, (charge * 100.0).round() / 100.0, out);
    if status == 429 {
        reply.substatus = SUB_RU_BUDGET_EXCEEDED;
        reply.retry_after_ms = outcomes
            .iter()
            .find_map(|o| o.retry_after)
            .map(ru::retry_after_ms);
    }
    reply
}

/// Writes the per-operation results of a batch response.
fn write_results(outcomes: &[Outcome], minimal: bool, out: &mut Vec<u8>) {
    out.push(b'[');
    for (i, o) in outcomes.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"statusCode\":");
        raw::push_u64(out, o.status.into());
        out.extend_from_slice(b",\"requestCharge\":");
        raw::push_charge(out, o.charge);
        if o.substatus != 0 {
            out.extend_from_slice(b",\"subStatusCode\":");
            raw::push_u64(out, o.substatus.into());
        }
        if let Some(wait) = o.retry_after {
            out.extend_from_slice(b",\"retryAfterMilliseconds\":");
            raw::push_u64(out, ru::retry_after_ms(wait));
        }
        if let Some(d) = &o.doc {
            out.extend_from_slice(b",\"eTag\":\"\\\"");
            out.extend_from_slice(d.etag_text().inner());
            out.extend_from_slice(b"\\\"\"");
            if !minimal {
                out.extend_from_slice(b",\"resourceBody\":");
                out.extend_from_slice(d.json());
            }
        }
        out.push(b'}');
    }
    out.push(b']');
}

/// The key of a batch operation: a JSON string holding the key's JSON array, e.g.
/// `"[\"drone-42\"]"`. A plain string key is read off the text; anything else is unescaped and
/// parsed.
fn batch_operation_key(raw: &[u8]) -> Option<PartitionKey> {
    let text = std::str::from_utf8(raw).ok()?;
    if let Some(s) = text
        .strip_prefix("\"[\\\"")
        .and_then(|t| t.strip_suffix("\\\"]\""))
        .filter(|s| raw::is_plain(s.as_bytes()))
    {
        return Some(PartitionKey::of_plain_str(s));
    }
    let header: String = serde_json::from_str(text).ok()?;
    PartitionKey::from_header(&header)
}

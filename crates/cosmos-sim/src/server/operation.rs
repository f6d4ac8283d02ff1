//! A document operation from a request's parts, the same for a point request and a batch
//! operation: its kind, id, partition key, body and preconditions; the range a request names by
//! id; the operation counters' names.

use super::reply::Reply;
use crate::document_ops::{Addressed, Ctx, DocOp, Outcome, Patch, Preconditions};
use crate::raw::{self, Fields};
use crate::store::{Container, PartitionKey, Range};
use cosmos_wire::batch::OperationType;
use cosmos_wire::status::SUB_PARTITION_KEY_RANGE_GONE;
use std::sync::Arc;

/// The name an operation is counted under.
pub(super) fn op_kind(t: OperationType) -> &'static str {
    match t {
        OperationType::Create => "create",
        OperationType::Upsert => "upsert",
        OperationType::Read => "read",
        OperationType::Delete => "delete",
        OperationType::Replace => "replace",
        OperationType::Patch => "patch",
    }
}

/// Builds the operation from its parts: its body (JSON text, already validated), its id (from
/// the path, the batch operation, or the body), its partition key (given, or read from the body).
pub(super) fn address<'a>(
    ctx: &Ctx<'_>,
    kind: OperationType,
    id: Option<&str>,
    pk: Option<PartitionKey>,
    body: Option<(&'a [u8], Option<Fields<'a>>)>,
    pre: Preconditions,
) -> Result<Addressed<'a>, Outcome> {
    let bad = |msg: &str| Outcome::error(400, 0, 0.0, msg);
    let (op, body_id, pk) = match kind {
        OperationType::Read | OperationType::Delete | OperationType::Patch => {
            let op = match kind {
                OperationType::Read => DocOp::Read,
                OperationType::Delete => DocOp::Delete,
                _ => {
                    let (body, _) = body.ok_or_else(|| bad("The patch has no body."))?;
                    DocOp::Patch(match raw::read_set_patch(body, &ctx.container.pk_path) {
                        Some(sets) => Patch::Sets(sets),
                        None => Patch::Parsed(serde_json::from_slice(body).map_err(|e| {
                            Outcome::error(400, 0, 0.0, format!("invalid patch body: {e}"))
                        })?),
                    })
                }
            };
            let pk = pk.ok_or_else(|| {
                bad("The partition key is required (x-ms-documentdb-partitionkey or the operation's partitionKey).")
            })?;
            (op, None, pk)
        }
        OperationType::Create | OperationType::Upsert | OperationType::Replace => {
            let (body, fields) = body.ok_or_else(|| bad("The operation has no document."))?;
            let checked = ctx.check_body(body, fields, pk)?;
            let op = match kind {
                OperationType::Create => DocOp::Create(checked.doc),
                OperationType::Upsert => DocOp::Upsert(checked.doc),
                _ => DocOp::Replace(checked.doc),
            };
            (op, Some(checked.id), checked.pk)
        }
    };
    let id = match (id, body_id) {
        (Some(id), Some(body_id)) if id != body_id => {
            return Err(bad(
                "The id in the path or operation differs from the document's id.",
            ));
        }
        (_, Some(body_id)) => body_id,
        (Some(id), None) => id.to_string(),
        (None, None) => return Err(bad("The operation names no document id.")),
    };
    Ok(Addressed { id, pk, op, pre })
}

/// Resolves the range a request targets by id: 410/1002 if it was split away.
pub(super) fn range_by_id(c: &Container, id: &str) -> Result<Arc<Range>, Reply> {
    c.ranges.read().by_id(id).map_err(|gone| {
        if gone {
            Reply::error(
                410,
                SUB_PARTITION_KEY_RANGE_GONE,
                format!(
                    "The partition key range {id} is gone (it was split); refresh the range map."
                ),
            )
        } else {
            Reply::error(
                404,
                1002,
                format!("The partition key range {id} does not exist."),
            )
        }
    })
}

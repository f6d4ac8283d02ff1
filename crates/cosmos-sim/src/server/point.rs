//! A point operation on one document (`POST`, `GET`, `PUT`, `DELETE`, `PATCH` under
//! `.../docs`): addressed, executed on its range, answered with the range id.

use super::headers::{header_pk, is_minimal, preconditions};
use super::operation::{address, op_kind};
use super::reply::Reply;
use crate::document_ops::Ctx;
use crate::endpoint_state::EndpointState;
use crate::raw::{self, Invalid};
use bytes::Bytes;
use cosmos_wire::batch::OperationType;
use cosmos_wire::headers as h;
use http::HeaderMap;

/// Serves one point operation of `kind` on the document `id` (from the path; `None` for a
/// create or upsert, whose id is in the body).
pub(super) fn point(
    state: &EndpointState,
    ctx: &Ctx<'_>,
    headers: &HeaderMap,
    body: &Bytes,
    id: Option<&str>,
    kind: OperationType,
) -> Reply {
    let pk = match header_pk(headers) {
        Ok(pk) => pk,
        Err(r) => return r,
    };
    let doc = if matches!(kind, OperationType::Read | OperationType::Delete) {
        None
    } else {
        let text = std::str::from_utf8(body).map_err(|_| Invalid(0));
        match text.and_then(|t| raw::document(t, &ctx.container.pk_path)) {
            Ok(fields) => Some((&body[..], fields)),
            Err(e) => {
                return Reply::error(400, 0, format!("The request body is not valid JSON: {e}"));
            }
        }
    };
    let addressed = match address(ctx, kind, id, pk, doc, preconditions(headers)) {
        Ok(a) => a,
        Err(o) => return Reply::from_outcome(&o),
    };
    state.counters.operations(op_kind(kind), 1);
    let ranges = ctx.container.ranges.read();
    let range = ranges.for_epk(addressed.pk.epk);
    let is_write = addressed.op.is_write();
    let outcome = ctx.execute(&mut range.part.lock(), addressed);
    let mut reply = Reply::from_outcome(&outcome);
    if is_minimal(headers) && is_write {
        reply.body.clear();
    }
    reply.header(h::PARTITION_KEY_RANGE_ID, range.id.clone())
}

//! Queries over `POST .../docs`: one partition key or one range per request, paged by a
//! continuation token, refused before they run when the partition has no budget left for their
//! priority; the query plan the SDKs ask for first, and the 400 that sends a
//! cross-partition query back to them.

use super::headers::{header, header_pk, is_true};
use super::operation::range_by_id;
use super::reply::Reply;
use crate::document_ops::{Ctx, Outcome};
use crate::endpoint_state::EndpointState;
use crate::query::{self, parse::parse_query};
use crate::ru;
use crate::store::Doc;
use cosmos_wire::headers as h;
use cosmos_wire::resources::QueryRequest;
use http::HeaderMap;
use serde_json::{Value, json};
use std::sync::Arc;

/// Runs the query in `body` on the partition key or range the headers name.
pub(super) fn run_query(
    state: &EndpointState,
    ctx: &Ctx<'_>,
    headers: &HeaderMap,
    body: &[u8],
) -> Reply {
    let req: QueryRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return Reply::error(
                400,
                0,
                format!("The query body is not {{\"query\":..., \"parameters\":[...]}}: {e}"),
            );
        }
    };
    let q = match parse_query(&req.query) {
        Ok(q) => q,
        Err(e) => return Reply::error(400, 0, format!("Syntax error in {:?}: {e}", req.query)),
    };
    if is_true(headers, "x-ms-cosmos-is-query-plan-request") {
        return query_plan(&q);
    }
    if let Some(reply) = order_by_excluded(&q, ctx) {
        return reply;
    }
    let params: Vec<(String, Value)> = req
        .parameters
        .into_iter()
        .map(|p| (p.name, p.value))
        .collect();
    let pk = match header_pk(headers) {
        Ok(pk) => pk,
        Err(r) => return r,
    };
    let ranges = ctx.container.ranges.read();
    let range = match (header(headers, h::PARTITION_KEY_RANGE_ID), &pk) {
        (Some(id), _) => match range_by_id(ctx.container, id) {
            Ok(r) => r,
            Err(reply) => return reply,
        },
        (None, Some(pk)) => ranges.for_epk(pk.epk),
        (None, None) if ranges.live.len() == 1 => ranges.live[0].clone(),
        (None, None) => return cross_partition_error(&q),
    };
    let start = header(headers, h::CONTINUATION)
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .and_then(|v| v.get("offset").and_then(Value::as_u64))
        .unwrap_or(0) as usize;
    let max_items = match header(headers, h::MAX_ITEM_COUNT).and_then(|v| v.parse::<i64>().ok()) {
        Some(n) if n > 0 => n as usize,
        Some(_) => usize::MAX,
        None => 100,
    };
    state.counters.operations("query", 1);
    // The documents are taken under the partition's lock and the query runs without it, so
    // that writes to the partition do not wait for a long scan (the service runs them side
    // by side too).
    let docs: Vec<Arc<Doc>> = {
        let mut part = range.part.lock();
        // A partition with nothing left for this priority refuses the query before it runs.
        if let Err(wait) = part.bucket.admits(ctx.priority) {
            part.counters.throttle(ctx.priority);
            return Reply::from_outcome(&Outcome::throttled(wait));
        }
        match &pk {
            Some(pk) => part
                .docs
                .get(&pk.canonical)
                .into_iter()
                .flat_map(|l| l.values())
                .cloned()
                .collect(),
            None => part
                .docs
                .values()
                .flat_map(|l| l.values())
                .cloned()
                .collect(),
        }
    };
    let page = query::execute(&q, &params, docs.iter(), start, max_items);
    let mut out = Vec::new();
    let returned = query::write_feed(&page.items, &mut out);
    let charge = ru::query(page.scanned, returned);
    let mut part = range.part.lock();
    if let Err(wait) = part.bucket.try_take(charge, ctx.priority) {
        part.counters.throttle(ctx.priority);
        return Reply::from_outcome(&Outcome::throttled(wait));
    }
    part.counters.charge(charge);
    drop(part);
    let mut reply =
        Reply::json(200, charge, out).header(h::ITEM_COUNT, page.items.len().to_string());
    if let Some(next) = page.next {
        reply = reply.header(h::CONTINUATION, json!({"offset": next}).to_string());
    }
    reply
}

fn query_plan_body(q: &query::ast::Query) -> Value {
    json!({
        "partitionedQueryExecutionInfoVersion": 2,
        "queryInfo": {
            "distinctType": "None", "top": q.top, "offset": null, "limit": null,
            "orderBy": [], "orderByExpressions": [], "groupByExpressions": [], "groupByAliases": [],
            "aggregates": [], "groupByAliasToAggregateType": {}, "rewrittenQuery": "",
            "hasSelectValue": matches!(q.projection, query::ast::Projection::Value(_)),
            "dCountInfo": null, "hasNonStreamingOrderBy": false
        },
        "queryRanges": [{"min": "", "max": "FF", "isMinInclusive": true, "isMaxInclusive": false}]
    })
}

/// The 400 of an `ORDER BY` on a path the container's indexing policy does not index: the
/// service needs a range index for it ("fails if the path it references doesn't have one").
/// The message is the service's, as its clients report it.
fn order_by_excluded(q: &query::ast::Query, ctx: &Ctx<'_>) -> Option<Reply> {
    let Some((query::ast::Expr::Path(root, segs), _)) = &q.order_by else {
        return None;
    };
    if root != &q.alias {
        return None;
    }
    let path: Vec<&str> = segs
        .iter()
        .map(|s| match s {
            query::ast::PathSeg::Field(name) => name.as_str(),
            query::ast::PathSeg::Index(_) => "[]",
        })
        .collect();
    (!ctx.container.indexing.indexes(&path)).then(|| {
        Reply::error(
            400,
            0,
            "The index path corresponding to the specified order-by item is excluded.",
        )
    })
}

fn query_plan(q: &query::ast::Query) -> Reply {
    if q.order_by.is_some() || q.offset_limit.is_some() {
        return Reply::error(
            400,
            0,
            "cosmos-sim runs ORDER BY and OFFSET/LIMIT on one partition only: give a partition key or a range id.",
        );
    }
    Reply::value(200, 0.0, &query_plan_body(q))
}

fn cross_partition_error(q: &query::ast::Query) -> Reply {
    let body = json!({
        "code": "BadRequest",
        "message": "The provided cross partition query can not be directly served by the gateway. This is a first chance (internal) exception that all newer clients will know how to handle gracefully. This exception is traced, but unless you see it bubble up as an exception (which only happens on older SDK clients), then you can safely ignore this message.",
        "additionalErrorInfo": query_plan_body(q).to_string(),
    });
    let mut r = Reply::value(400, 0.0, &body);
    r.substatus = 1004;
    r
}

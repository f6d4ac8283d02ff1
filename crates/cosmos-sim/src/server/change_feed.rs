//! The change feed of a container (`GET .../docs` with `A-IM: Incremental Feed`), as the REST
//! API and the SDKs' latest-version mode define it: per partition key range (or the part of
//! one the `x-ms-start-epk`/`x-ms-end-epk` headers name, or one logical partition), the
//! latest version of every document changed after the continuation, in the order of their
//! changes, a page of `x-ms-max-item-count` at a time; `304 Not Modified` when nothing
//! changed. Deletes do not appear (that is the all-versions-and-deletes mode, refused here).
//!
//! The continuation is the `etag` header: the number of the last change read, which every
//! document carries as `_lsn`. It is the account's ETag counter, given out under the range's
//! lock together with the write it numbers, so a reader that holds the same lock cannot miss
//! a change numbered below what it answers; numbers are account-wide, so a continuation stays
//! good for both children of a split range. `If-None-Match: *` starts from now; none starts
//! from the beginning; a start from a time (`If-Modified-Since`) is refused.
//!
//! Charge: Microsoft publishes no per-page figure for the change feed; a page is charged as a
//! point read of what it returns (1 RU per KB, at least 1), and a `304` 1 RU.

use super::headers::{header, header_pk};
use super::operation::range_by_id;
use super::reply::Reply;
use crate::document_ops::{Ctx, Outcome};
use crate::endpoint_state::EndpointState;
use crate::ru;
use crate::store::{Container, Doc, pk_epk_of_canonical};
use cosmos_wire::epk::boundary_to_u128;
use cosmos_wire::headers as h;
use http::HeaderMap;
use std::sync::Arc;

/// The `A-IM` value of the latest-version change feed.
const INCREMENTAL_FEED: &str = "Incremental Feed";

/// Documents per page when `x-ms-max-item-count` is not given.
const DEFAULT_PAGE: usize = 100;

/// Whether a `GET .../docs` asks for the change feed.
pub(super) fn is_change_feed(headers: &HeaderMap) -> bool {
    header(headers, "a-im").is_some()
}

/// Where to start reading: after a change number, or after the last change made so far.
enum From {
    After(u64),
    Now,
}

fn parse_from(headers: &HeaderMap) -> Result<From, Reply> {
    if header(headers, "if-modified-since").is_some() {
        return Err(Reply::error(
            400,
            0,
            "cosmos-sim starts the change feed from the beginning, from now or from a continuation, not from a time (If-Modified-Since).",
        ));
    }
    match header(headers, h::IF_NONE_MATCH) {
        None => Ok(From::After(0)),
        Some("*") => Ok(From::Now),
        Some(tag) => tag
            .trim_matches('"')
            .parse()
            .map(From::After)
            .map_err(|_| {
                Reply::error(
                    400,
                    0,
                    format!("If-None-Match {tag:?} is not a change feed continuation (an etag this feed answered, or *)."),
                )
            }),
    }
}

/// The EPK bounds of `x-ms-start-epk` and `x-ms-end-epk` (both or neither).
fn epk_bounds(headers: &HeaderMap) -> Result<Option<(u128, u128)>, Reply> {
    let bound = |name: &str| {
        header(headers, name).map(|v| {
            boundary_to_u128(v)
                .ok_or_else(|| Reply::error(400, 0, format!("{name} {v:?} is not an EPK.")))
        })
    };
    match (bound("x-ms-start-epk"), bound("x-ms-end-epk")) {
        (None, None) => Ok(None),
        (Some(min), Some(max)) => Ok(Some((min?, max?))),
        _ => Err(Reply::error(
            400,
            0,
            "x-ms-start-epk and x-ms-end-epk come together.",
        )),
    }
}

/// Serves one page of the change feed.
pub(super) fn change_feed(state: &EndpointState, ctx: &Ctx<'_>, headers: &HeaderMap) -> Reply {
    let c = ctx.container;
    let mode = header(headers, "a-im").unwrap_or_default();
    if !mode.eq_ignore_ascii_case(INCREMENTAL_FEED) {
        return Reply::error(
            400,
            0,
            format!(
                "A-IM {mode:?}: cosmos-sim serves the latest-version change feed only (A-IM: {INCREMENTAL_FEED})."
            ),
        );
    }
    let (from, bounds, pk) = match (parse_from(headers), epk_bounds(headers), header_pk(headers)) {
        (Ok(from), Ok(bounds), Ok(pk)) => (from, bounds, pk),
        (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return r,
    };
    let range = match (header(headers, h::PARTITION_KEY_RANGE_ID), &pk) {
        (Some(id), _) => match range_by_id(c, id) {
            Ok(r) => r,
            Err(reply) => return reply,
        },
        (None, Some(pk)) => c.ranges.read().for_epk(pk.epk),
        (None, None) => {
            return Reply::error(
                400,
                0,
                "The change feed is read per partition key range (x-ms-documentdb-partitionkeyrangeid) or partition key.",
            );
        }
    };
    let max_items = match header(headers, h::MAX_ITEM_COUNT).and_then(|v| v.parse::<i64>().ok()) {
        Some(n) if n > 0 => n as usize,
        Some(_) => usize::MAX,
        None => DEFAULT_PAGE,
    };
    state.counters.operations("change_feed", 1);
    let mut part = range.part.lock();
    let after = match from {
        From::After(n) => n,
        From::Now => state.store.last_etag_number(),
    };
    let mut changed: Vec<(u64, Arc<Doc>)> = part
        .docs
        .iter()
        .filter(|(key, _)| pk.as_ref().is_none_or(|pk| &pk.canonical == *key))
        .filter(|(key, _)| {
            bounds.is_none_or(|(min, max)| {
                let epk = pk_epk_of_canonical(key);
                min <= epk && epk < max
            })
        })
        .flat_map(|(_, logical)| logical.values())
        .filter_map(|doc| {
            let n = doc.etag_text().number();
            (n > after).then(|| (n, doc.clone()))
        })
        .collect();
    changed.sort_unstable_by_key(|(n, _)| *n);
    changed.truncate(max_items);
    let (out, returned) = page(c, &changed);
    let charge = if changed.is_empty() {
        1.0
    } else {
        ru::read(returned)
    };
    if let Err(wait) = part.bucket.try_take(charge, ctx.priority) {
        part.counters.throttle(ctx.priority);
        return Reply::from_outcome(&Outcome::throttled(wait));
    }
    part.counters.charge(charge);
    let last = changed.last().map_or(after, |(n, _)| *n);
    let count = changed.len();
    drop(part);
    let etag = format!("\"{last}\"");
    if count == 0 {
        return Reply::json(304, charge, Vec::new()).header(h::ETAG, etag);
    }
    Reply::json(200, charge, out)
        .header(h::ETAG, etag)
        .header(h::ITEM_COUNT, count.to_string())
}

/// The page's body, each document with its `_lsn`; and the bytes of the documents.
fn page(c: &Container, changed: &[(u64, Arc<Doc>)]) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(
        64 + changed
            .iter()
            .map(|(_, d)| d.json().len() + 24)
            .sum::<usize>(),
    );
    out.extend_from_slice(b"{\"_rid\":\"");
    out.extend_from_slice(c.rid.as_bytes());
    out.extend_from_slice(b"\",\"Documents\":[");
    let before = out.len();
    for (i, (lsn, doc)) in changed.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let open = crate::raw::open_object(doc.json()).expect("a stored document is an object");
        out.extend_from_slice(open);
        out.extend_from_slice(format!(",\"_lsn\":{lsn}}}").as_bytes());
    }
    let bytes = out.len() - before;
    out.extend_from_slice(format!("],\"_count\":{}}}", changed.len()).as_bytes());
    (out, bytes)
}

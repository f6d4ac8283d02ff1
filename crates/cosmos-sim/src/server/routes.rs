//! The REST paths: which handler serves a method and path.

use super::batch::batch;
use super::change_feed::{change_feed, is_change_feed};
use super::headers::{is_query, is_true};
use super::point::point;
use super::query::run_query;
use super::reply::Reply;
use super::resources::{self, not_found};
use crate::document_ops::Ctx;
use crate::endpoint_state::EndpointState;
use bytes::Bytes;
use cosmos_wire::auth::url_decode;
use cosmos_wire::batch::OperationType;
use cosmos_wire::headers as h;
use cosmos_wire::priority::Priority;
use http::{HeaderMap, Method};

/// Serves one signed request.
pub(super) fn route(
    state: &EndpointState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    priority: Priority,
    body: &Bytes,
) -> Reply {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| url_decode(s).unwrap_or_else(|| s.to_string()))
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    match (method, segs.as_slice()) {
        (&Method::GET, []) => resources::account(state, headers),
        (&Method::GET, ["dbs"]) => resources::list_databases(state),
        (&Method::POST, ["dbs"]) => resources::create_database(state, body),
        (&Method::GET, ["dbs", db]) => resources::read_database(state, db),
        (&Method::DELETE, ["dbs", db]) => resources::delete_database(state, db),
        (&Method::GET, ["dbs", db, "colls"]) => resources::list_containers(state, db),
        (&Method::POST, ["dbs", db, "colls"]) => {
            resources::create_container(state, db, headers, body)
        }
        (&Method::GET, ["dbs", db, "colls", coll]) => resources::read_container(state, db, coll),
        (&Method::DELETE, ["dbs", db, "colls", coll]) => {
            resources::delete_container(state, db, coll)
        }
        (_, ["dbs", db, "colls", coll, rest @ ..]) => {
            let Some(c) = state.store.container(db, coll) else {
                return not_found("container", coll);
            };
            let ctx = Ctx::new(&state.store, &c)
                .max_document_bytes(state.faults.max_document_bytes())
                .priority(priority);
            match (method, rest) {
                (&Method::GET, ["pkranges"]) => resources::pkranges(&c),
                (&Method::POST, ["docs"]) if is_true(headers, h::IS_BATCH_REQUEST) => {
                    batch(state, &ctx, headers, body)
                }
                (&Method::POST, ["docs"]) if is_query(headers) => {
                    run_query(state, &ctx, headers, body)
                }
                (&Method::GET, ["docs"]) if is_change_feed(headers) => {
                    change_feed(state, &ctx, headers)
                }
                (&Method::GET, ["docs"]) => {
                    run_query(state, &ctx, headers, br#"{"query":"SELECT * FROM c"}"#)
                }
                (&Method::POST, ["docs"]) => {
                    let kind = if is_true(headers, h::IS_UPSERT) {
                        OperationType::Upsert
                    } else {
                        OperationType::Create
                    };
                    point(state, &ctx, headers, body, None, kind)
                }
                (&Method::GET, ["docs", id]) => {
                    point(state, &ctx, headers, body, Some(id), OperationType::Read)
                }
                (&Method::PUT, ["docs", id]) => {
                    point(state, &ctx, headers, body, Some(id), OperationType::Replace)
                }
                (&Method::DELETE, ["docs", id]) => {
                    point(state, &ctx, headers, body, Some(id), OperationType::Delete)
                }
                (&Method::PATCH, ["docs", id]) => {
                    point(state, &ctx, headers, body, Some(id), OperationType::Patch)
                }
                _ => unsupported(method, path),
            }
        }
        _ => unsupported(method, path),
    }
}

fn unsupported(method: &Method, path: &str) -> Reply {
    Reply::error(
        405,
        0,
        format!("{method} {path} is not supported by cosmos-sim."),
    )
}

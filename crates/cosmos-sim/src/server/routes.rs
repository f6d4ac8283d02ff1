//! The REST paths: what a method and path name ([`Target`]), the data action a token needs
//! for it, and which handler serves it.

use super::auth::{DataAction, Need};
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

/// A request's path segments, percent-decoded.
pub(super) fn segments(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| url_decode(s).unwrap_or_else(|| s.to_string()))
        .collect()
}

/// What a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target<'a> {
    Account,
    Databases,
    CreateDatabase,
    Database(&'a str),
    DeleteDatabase(&'a str),
    Containers(&'a str),
    CreateContainer(&'a str),
    Container(&'a str, &'a str),
    DeleteContainer(&'a str, &'a str),
    /// Something under a container's path.
    In(&'a str, &'a str, Inside<'a>),
    Unsupported,
}

/// What a request names under a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Inside<'a> {
    PkRanges,
    Batch,
    Query,
    ChangeFeed,
    /// `GET .../docs` without a change feed header: every document.
    ReadFeed,
    /// One document operation; the id is in the path, or (create, upsert) in the body.
    Point(Option<&'a str>, OperationType),
    Unsupported,
}

impl<'a> Target<'a> {
    /// The target of `method` on `segments` (see [`segments`]).
    pub(super) fn of(method: &Method, segments: &'a [String], headers: &HeaderMap) -> Self {
        let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (method, segs.as_slice()) {
            (&Method::GET, []) => Target::Account,
            (&Method::GET, ["dbs"]) => Target::Databases,
            (&Method::POST, ["dbs"]) => Target::CreateDatabase,
            (&Method::GET, ["dbs", _]) => Target::Database(&segments[1]),
            (&Method::DELETE, ["dbs", _]) => Target::DeleteDatabase(&segments[1]),
            (&Method::GET, ["dbs", _, "colls"]) => Target::Containers(&segments[1]),
            (&Method::POST, ["dbs", _, "colls"]) => Target::CreateContainer(&segments[1]),
            (&Method::GET, ["dbs", _, "colls", _]) => Target::Container(&segments[1], &segments[3]),
            (&Method::DELETE, ["dbs", _, "colls", _]) => {
                Target::DeleteContainer(&segments[1], &segments[3])
            }
            (_, ["dbs", _, "colls", _, rest @ ..]) => {
                let id = segments.get(5).map(String::as_str);
                let inside = match (method, rest) {
                    (&Method::GET, ["pkranges"]) => Inside::PkRanges,
                    (&Method::POST, ["docs"]) if is_true(headers, h::IS_BATCH_REQUEST) => {
                        Inside::Batch
                    }
                    (&Method::POST, ["docs"]) if is_query(headers) => Inside::Query,
                    (&Method::GET, ["docs"]) if is_change_feed(headers) => Inside::ChangeFeed,
                    (&Method::GET, ["docs"]) => Inside::ReadFeed,
                    (&Method::POST, ["docs"]) if is_true(headers, h::IS_UPSERT) => {
                        Inside::Point(None, OperationType::Upsert)
                    }
                    (&Method::POST, ["docs"]) => Inside::Point(None, OperationType::Create),
                    (&Method::GET, ["docs", _]) => Inside::Point(id, OperationType::Read),
                    (&Method::PUT, ["docs", _]) => Inside::Point(id, OperationType::Replace),
                    (&Method::DELETE, ["docs", _]) => Inside::Point(id, OperationType::Delete),
                    (&Method::PATCH, ["docs", _]) => Inside::Point(id, OperationType::Patch),
                    _ => Inside::Unsupported,
                };
                Target::In(&segments[1], &segments[3], inside)
            }
            _ => Target::Unsupported,
        }
    }

    /// What a token's principal needs to be let do this: a data action, the actions of a
    /// batch's operations, or nothing a token may do (managing databases and containers).
    pub(super) fn need(self) -> Need {
        match self {
            Target::Account
            | Target::Databases
            | Target::Database(_)
            | Target::Containers(_)
            | Target::Container(..)
            | Target::In(_, _, Inside::PkRanges) => Need::Data(DataAction::ReadMetadata),
            Target::In(_, _, Inside::Batch) => Need::Batch,
            Target::In(_, _, Inside::Query | Inside::ReadFeed) => {
                Need::Data(DataAction::ExecuteQuery)
            }
            Target::In(_, _, Inside::ChangeFeed) => Need::Data(DataAction::ReadChangeFeed),
            Target::In(_, _, Inside::Point(_, kind)) => Need::Data(DataAction::of(kind)),
            Target::CreateDatabase
            | Target::DeleteDatabase(_)
            | Target::CreateContainer(_)
            | Target::DeleteContainer(..)
            | Target::In(_, _, Inside::Unsupported)
            | Target::Unsupported => Need::Management,
        }
    }
}

/// Serves one request let in.
pub(super) fn route(
    state: &EndpointState,
    target: Target<'_>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    priority: Priority,
    body: &Bytes,
) -> Reply {
    match target {
        Target::Account => resources::account(state, headers),
        Target::Databases => resources::list_databases(state),
        Target::CreateDatabase => resources::create_database(state, body),
        Target::Database(db) => resources::read_database(state, db),
        Target::DeleteDatabase(db) => resources::delete_database(state, db),
        Target::Containers(db) => resources::list_containers(state, db),
        Target::CreateContainer(db) => resources::create_container(state, db, headers, body),
        Target::Container(db, coll) => resources::read_container(state, db, coll),
        Target::DeleteContainer(db, coll) => resources::delete_container(state, db, coll),
        Target::In(db, coll, inside) => {
            let Some(c) = state.store.container(db, coll) else {
                return not_found("container", coll);
            };
            let ctx = Ctx::new(&state.store, &c)
                .max_document_bytes(state.faults.max_document_bytes())
                .priority(priority);
            match inside {
                Inside::PkRanges => resources::pkranges(&c),
                Inside::Batch => batch(state, &ctx, headers, body),
                Inside::Query => run_query(state, &ctx, headers, body),
                Inside::ChangeFeed => change_feed(state, &ctx, headers),
                Inside::ReadFeed => {
                    run_query(state, &ctx, headers, br#"{"query":"SELECT * FROM c"}"#)
                }
                Inside::Point(id, kind) => point(state, &ctx, headers, body, id, kind),
                Inside::Unsupported => unsupported(method, path),
            }
        }
        Target::Unsupported => unsupported(method, path),
    }
}

fn unsupported(method: &Method, path: &str) -> Reply {
    Reply::error(
        405,
        0,
        format!("{method} {path} is not supported by cosmos-sim."),
    )
}

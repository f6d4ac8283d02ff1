//! The HTTP side: accepting connections (HTTP/1.1, keep-alive), injecting faults, checking the
//! master-key signature, routing the REST paths to the store, and writing responses with the
//! service's headers (`x-ms-request-charge` on every one).

use crate::admin;
use crate::docs::{Addressed, Ctx, DocOp, Outcome, Preconditions};
use crate::faults::Injected;
use crate::query::{self, parse::parse_query};
use crate::raw::{self, BatchError, Fields, Invalid};
use crate::ru;
use crate::sim::Shared;
use crate::store::{Container, CreateError, PartitionKey, Range};
use bytes::Bytes;
use cosmos_wire::auth::{AuthorizationHeader, resource_for_path, string_to_sign, url_decode};
use cosmos_wire::batch::{MAX_BODY_BYTES, MAX_OPERATIONS, OperationType};
use cosmos_wire::headers as h;
use cosmos_wire::resources::{ErrorBody, PartitionKeyRanges, PatchRequest, QueryRequest};
use cosmos_wire::status::SUB_PARTITION_KEY_RANGE_GONE;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Request bodies larger than this are refused before parsing (413).
const MAX_REQUEST_BYTES: usize = MAX_BODY_BYTES + 64 * 1024;

/// Accepts connections until `stop` turns true, then closes them gracefully.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(shared, req).await) }
            });
            let conn = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

/// A response under construction.
pub(crate) struct Reply {
    status: u16,
    substatus: u32,
    charge: f64,
    retry_after_ms: Option<u64>,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Reply {
    pub(crate) fn json(status: u16, charge: f64, body: Vec<u8>) -> Self {
        Self {
            status,
            substatus: 0,
            charge,
            retry_after_ms: None,
            headers: Vec::new(),
            body,
        }
    }

    pub(crate) fn value(status: u16, charge: f64, body: &Value) -> Self {
        Self::json(
            status,
            charge,
            serde_json::to_vec(body).expect("a JSON value serializes"),
        )
    }

    pub(crate) fn error(status: u16, substatus: u32, message: impl Into<String>) -> Self {
        let body = ErrorBody {
            code: code_name(status).to_string(),
            message: message.into(),
        };
        Self {
            substatus,
            ..Self::json(
                status,
                0.0,
                serde_json::to_vec(&body).expect("serializable"),
            )
        }
    }

    fn from_outcome(o: &Outcome) -> Self {
        if o.is_success() {
            let mut r = Self::json(
                o.status,
                o.charge,
                o.doc
                    .as_ref()
                    .map(|d| d.json().to_vec())
                    .unwrap_or_default(),
            );
            if let Some(d) = &o.doc {
                r.headers.push((h::ETAG, d.etag().to_string()));
            }
            return r;
        }
        let mut r = Self::error(o.status, o.substatus, o.message.clone().unwrap_or_default());
        r.charge = o.charge;
        r.retry_after_ms = o.retry_after.map(ru::retry_after_ms);
        r
    }

    fn header(mut self, name: &'static str, value: String) -> Self {
        self.headers.push((name, value));
        self
    }

    fn into_response(self) -> Response<Full<Bytes>> {
        static ACTIVITY: AtomicU64 = AtomicU64::new(1);
        let mut resp = Response::new(Full::new(Bytes::from(self.body)));
        *resp.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let hm = resp.headers_mut();
        hm.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let mut charge = String::with_capacity(12);
        let _ = write!(charge, "{}", self.charge);
        hm.insert(
            h::REQUEST_CHARGE,
            HeaderValue::from_str(&charge).expect("a number is a valid header"),
        );
        let activity = ACTIVITY.fetch_add(1, Ordering::Relaxed);
        hm.insert(
            h::ACTIVITY_ID,
            HeaderValue::from_str(&format!("00000000-0000-0000-0000-{activity:012x}"))
                .expect("valid"),
        );
        hm.insert(h::SESSION_TOKEN, HeaderValue::from_static("0:-1#1"));
        if self.substatus != 0 {
            hm.insert(h::SUBSTATUS, HeaderValue::from(self.substatus));
        }
        if let Some(ms) = self.retry_after_ms {
            hm.insert(h::RETRY_AFTER_MS, HeaderValue::from(ms));
        }
        for (name, value) in self.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                hm.insert(name, v);
            }
        }
        resp
    }
}

fn code_name(status: u16) -> &'static str {
    match status {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        408 => "RequestTimeout",
        409 => "Conflict",
        410 => "Gone",
        412 => "PreconditionFailed",
        413 => "RequestEntityTooLarge",
        424 => "FailedDependency",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalServerError",
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    if parts.uri.path().starts_with("/_admin") {
        let body = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => return Reply::error(413, 0, "request body too large").into_response(),
        };
        return admin::handle(&shared, &parts.method, parts.uri.path(), &body).into_response();
    }
    shared.counters.request();
    let latency = shared.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match shared.faults.draw() {
        Injected::None => {}
        Injected::Unavailable => {
            return Reply::error(503, 0, "Service is currently unavailable (injected fault).")
                .into_response();
        }
        Injected::Timeout(hold) => {
            tokio::time::sleep(hold).await;
            return Reply::error(408, 0, "Request timed out (injected fault).").into_response();
        }
    }
    if let Err(reply) = check_auth(&shared, &parts.method, parts.uri.path(), &parts.headers) {
        return reply.into_response();
    }
    let body = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return Reply::error(
                413,
                0,
                format!("Request size is too large: at most {MAX_BODY_BYTES} bytes."),
            )
            .into_response();
        }
    };
    let reply = route(
        &shared,
        &parts.method,
        parts.uri.path(),
        &parts.headers,
        &body,
    );
    if reply.status == 429 {
        shared.counters.throttled_request();
    }
    reply.into_response()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn is_true(headers: &HeaderMap, name: &str) -> bool {
    header(headers, name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Checks the master-key signature exactly as the service does.
fn check_auth(
    shared: &Shared,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<(), Reply> {
    let Some(raw) = header(headers, "authorization") else {
        return Err(Reply::error(
            401,
            0,
            "Required Header authorization is missing. Ensure a valid Authorization token is passed.",
        ));
    };
    let auth = AuthorizationHeader::parse(raw)
        .map_err(|e| Reply::error(401, 0, format!("The authorization header is invalid: {e}")))?;
    if auth.kind != "master" {
        return Err(Reply::error(
            401,
            0,
            format!(
                "Authorization of type {:?} is not supported here; sign with the master key.",
                auth.kind
            ),
        ));
    }
    let Some(date) = header(headers, h::DATE).or_else(|| header(headers, "date")) else {
        return Err(Reply::error(401, 0, "The request has no x-ms-date header."));
    };
    let (rtype, link) = resource_for_path(path);
    if shared
        .key
        .read()
        .verifies(&auth.signature, method.as_str(), &rtype, &link, date)
    {
        return Ok(());
    }
    let signed = string_to_sign(method.as_str(), &rtype, &link, date).replace('\n', "\\n");
    Err(Reply::error(
        401,
        0,
        format!(
            "The input authorization token can't serve the request. Please check that the expected payload is built as per the protocol, and check the key being used. Server used the following payload to sign: '{signed}'"
        ),
    ))
}

fn route(shared: &Shared, method: &Method, path: &str, headers: &HeaderMap, body: &Bytes) -> Reply {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| url_decode(s).unwrap_or_else(|| s.to_string()))
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    match (method, segs.as_slice()) {
        (&Method::GET, []) => account(shared, headers),
        (&Method::GET, ["dbs"]) => {
            let dbs: Vec<Value> = shared
                .store
                .databases
                .read()
                .values()
                .map(|d| d.body.clone())
                .collect();
            feed("Databases", dbs)
        }
        (&Method::POST, ["dbs"]) => {
            let Some(id) = parse_json(body)
                .ok()
                .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
            else {
                return Reply::error(400, 0, "The database definition needs a string \"id\".");
            };
            match shared.store.create_database(&id) {
                Ok(db) => Reply::value(201, ru::METADATA, &db.body),
                Err(e) => create_error(e, "database"),
            }
        }
        (&Method::GET, ["dbs", db]) => match shared.store.database(db) {
            Some(d) => Reply::value(200, ru::METADATA, &d.body),
            None => not_found("database", db),
        },
        (&Method::DELETE, ["dbs", db]) => match shared.store.databases.write().remove(*db) {
            Some(_) => Reply::json(204, ru::METADATA, Vec::new()),
            None => not_found("database", db),
        },
        (&Method::GET, ["dbs", db, "colls"]) => match shared.store.database(db) {
            Some(d) => feed(
                "DocumentCollections",
                d.containers
                    .read()
                    .values()
                    .map(|c| c.body.clone())
                    .collect(),
            ),
            None => not_found("database", db),
        },
        (&Method::POST, ["dbs", db, "colls"]) => {
            let Ok(definition) = parse_json(body) else {
                return Reply::error(400, 0, "The container definition is not valid JSON.");
            };
            let ru = match header(headers, h::OFFER_THROUGHPUT).map(str::parse::<f64>) {
                Some(Ok(ru)) if ru >= 1.0 => ru,
                Some(_) => {
                    return Reply::error(
                        400,
                        0,
                        "x-ms-offer-throughput must be a number of RU/s, at least 1.",
                    );
                }
                None => shared.default_ru(),
            };
            match shared
                .store
                .create_container(db, &definition, shared.partitions, ru)
            {
                Ok(c) => Reply::value(201, ru::METADATA, &c.body),
                Err(e) => create_error(e, "container"),
            }
        }
        (&Method::GET, ["dbs", db, "colls", coll]) => match shared.store.container(db, coll) {
            Some(c) => Reply::value(200, ru::METADATA, &c.body),
            None => not_found("container", coll),
        },
        (&Method::DELETE, ["dbs", db, "colls", coll]) => {
            let removed = shared
                .store
                .database(db)
                .and_then(|d| d.containers.write().remove(*coll));
            match removed {
                Some(_) => Reply::json(204, ru::METADATA, Vec::new()),
                None => not_found("container", coll),
            }
        }
        (_, ["dbs", db, "colls", coll, rest @ ..]) => {
            let Some(c) = shared.store.container(db, coll) else {
                return not_found("container", coll);
            };
            let ctx =
                Ctx::new(&shared.store, &c).max_document_bytes(shared.faults.max_document_bytes());
            match (method, rest) {
                (&Method::GET, ["pkranges"]) => pkranges(&c),
                (&Method::POST, ["docs"]) if is_true(headers, h::IS_BATCH_REQUEST) => {
                    batch(shared, &ctx, headers, body)
                }
                (&Method::POST, ["docs"]) if is_query(headers) => {
                    run_query(shared, &ctx, headers, body)
                }
                (&Method::GET, ["docs"]) => {
                    run_query(shared, &ctx, headers, br#"{"query":"SELECT * FROM c"}"#)
                }
                (&Method::POST, ["docs"]) => {
                    let upsert = is_true(headers, h::IS_UPSERT);
                    point(
                        shared,
                        &ctx,
                        headers,
                        body,
                        None,
                        if upsert {
                            OperationType::Upsert
                        } else {
                            OperationType::Create
                        },
                    )
                }
                (&Method::GET, ["docs", id]) => {
                    point(shared, &ctx, headers, body, Some(id), OperationType::Read)
                }
                (&Method::PUT, ["docs", id]) => point(
                    shared,
                    &ctx,
                    headers,
                    body,
                    Some(id),
                    OperationType::Replace,
                ),
                (&Method::DELETE, ["docs", id]) => {
                    point(shared, &ctx, headers, body, Some(id), OperationType::Delete)
                }
                (&Method::PATCH, ["docs", id]) => {
                    point(shared, &ctx, headers, body, Some(id), OperationType::Patch)
                }
                _ => Reply::error(
                    405,
                    0,
                    format!("{method} {path} is not supported by cosmos-sim."),
                ),
            }
        }
        _ => Reply::error(
            405,
            0,
            format!("{method} {path} is not supported by cosmos-sim."),
        ),
    }
}

fn parse_json(body: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice(body)
}

fn feed(name: &str, items: Vec<Value>) -> Reply {
    let count = items.len();
    Reply::value(
        200,
        ru::METADATA,
        &json!({"_rid": "", name: items, "_count": count}),
    )
    .header(h::ITEM_COUNT, count.to_string())
}

fn not_found(what: &str, id: &str) -> Reply {
    Reply::error(
        404,
        0,
        format!("Resource Not Found: {what} {id:?} does not exist."),
    )
}

fn create_error(e: CreateError, what: &str) -> Reply {
    match e {
        CreateError::Conflict => Reply::error(
            409,
            0,
            format!("Resource with specified id or name already exists: this {what} exists."),
        ),
        CreateError::NotFound => not_found("database", ""),
        CreateError::Invalid(msg) => Reply::error(400, 0, msg),
    }
}

fn account(shared: &Shared, headers: &HeaderMap) -> Reply {
    let host = header(headers, "host").map_or_else(|| shared.addr.to_string(), str::to_string);
    let endpoint = format!("http://{host}/");
    let location = json!([{"name": "local", "databaseAccountEndpoint": endpoint}]);
    let query_engine = json!({
        "maxSqlQueryInputLength": 262144, "maxJoinsPerSqlQuery": 5, "maxLogicalAndPerSqlQuery": 500,
        "maxLogicalOrPerSqlQuery": 500, "maxUdfRefPerSqlQuery": 10, "maxInExpressionItemsCount": 16000,
        "queryMaxInMemorySortDocumentCount": 500, "maxQueryRequestTimeoutFraction": 0.9,
        "sqlAllowNonFiniteNumbers": false, "sqlAllowAggregateFunctions": true, "sqlAllowSubQuery": false,
        "sqlAllowScalarSubQuery": false, "allowNewKeywords": true, "sqlAllowLike": false,
        "sqlAllowGroupByClause": false, "maxSpatialQueryCells": 12, "spatialMaxGeometryPointCount": 256,
        "sqlDisableOptimizationFlags": 0, "sqlAllowTop": true, "enableSpatialIndexing": true
    });
    let body = json!({
        "_self": "", "id": "cosmos-sim", "_rid": "cosmos-sim", "media": "//media/", "addresses": "//addresses/",
        "_dbs": "//dbs/", "writableLocations": location, "readableLocations": location,
        "enableMultipleWriteLocations": false,
        "userReplicationPolicy": {"asyncReplication": false, "minReplicaSetSize": 1, "maxReplicasetSize": 4},
        "userConsistencyPolicy": {"defaultConsistencyLevel": "Session"},
        "systemReplicationPolicy": {"minReplicaSetSize": 1, "maxReplicasetSize": 4},
        "readPolicy": {"primaryReadCoefficient": 1, "secondaryReadCoefficient": 1},
        "queryEngineConfiguration": query_engine.to_string(),
    });
    Reply::value(200, ru::METADATA, &body)
}

fn pkranges(c: &Container) -> Reply {
    let ranges = c.ranges.read();
    let wire = PartitionKeyRanges {
        ranges: ranges.live.iter().map(|r| r.to_wire()).collect(),
        count: ranges.live.len(),
    };
    let mut body = serde_json::to_value(&wire).expect("serializable");
    body["_rid"] = json!(c.rid);
    let etag = format!("\"{}\"", ranges.live.len() + ranges.gone.len());
    Reply::value(200, ru::METADATA, &body)
        .header(h::ITEM_COUNT, wire.count.to_string())
        .header(h::ETAG, etag)
}

fn is_query(headers: &HeaderMap) -> bool {
    is_true(headers, h::IS_QUERY)
        || header(headers, "content-type").is_some_and(|v| v.starts_with("application/query+json"))
}

fn header_pk(headers: &HeaderMap) -> Result<Option<PartitionKey>, Reply> {
    match header(headers, h::PARTITION_KEY) {
        None => Ok(None),
        Some(raw) => PartitionKey::from_header(raw).map(Some).ok_or_else(|| {
            Reply::error(400, 0, format!("The partition key header {raw:?} is not a JSON array of one value, e.g. [\"drone-42\"] (or [{{}}] for the undefined key)."))
        }),
    }
}

fn preconditions(headers: &HeaderMap) -> Preconditions {
    Preconditions {
        if_match: header(headers, h::IF_MATCH).map(str::to_string),
        if_none_match: header(headers, h::IF_NONE_MATCH).map(str::to_string),
    }
}

fn op_kind(t: OperationType) -> &'static str {
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
fn address<'a>(
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
                    let req: PatchRequest = serde_json::from_slice(body).map_err(|e| {
                        Outcome::error(400, 0, 0.0, format!("invalid patch body: {e}"))
                    })?;
                    DocOp::Patch(req)
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

fn point(
    shared: &Shared,
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
    shared.counters.operations(op_kind(kind), 1);
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

fn is_minimal(headers: &HeaderMap) -> bool {
    header(headers, "prefer").is_some_and(|v| v.contains("return=minimal"))
}

/// Resolves the range a request targets by id: 410/1002 if it was split away.
fn range_by_id(c: &Container, id: &str) -> Result<Arc<Range>, Reply> {
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

fn batch(shared: &Shared, ctx: &Ctx<'_>, headers: &HeaderMap, body: &Bytes) -> Reply {
    if body.len() > MAX_BODY_BYTES {
        return Reply::error(
            413,
            0,
            format!(
                "The batch request body is {} bytes; at most {MAX_BODY_BYTES}.",
                body.len()
            ),
        );
    }
    let text = std::str::from_utf8(body).map_err(|e| BatchError::from(Invalid(e.valid_up_to())));
    let ops = match text.and_then(|t| raw::read_batch(t, &ctx.container.pk_path)) {
        Ok(ops) => ops,
        Err(e) => {
            return Reply::error(
                400,
                0,
                format!("The batch body is not a JSON array of operations: {e}"),
            );
        }
    };
    if ops.is_empty() || ops.len() > MAX_OPERATIONS {
        return Reply::error(
            400,
            0,
            format!(
                "A batch holds 1 to {MAX_OPERATIONS} operations, not {}.",
                ops.len()
            ),
        );
    }
    let header_pk = match header_pk(headers) {
        Ok(pk) => pk,
        Err(r) => return r,
    };
    let atomic = !header(headers, h::BATCH_ATOMIC).is_some_and(|v| v.eq_ignore_ascii_case("false"));
    let continue_on_error = is_true(headers, h::BATCH_CONTINUE_ON_ERROR);
    let minimal = is_minimal(headers);
    let mut counts: [u64; 6] = [0; 6];
    let addressed: Vec<(OperationType, Result<Addressed<'_>, Outcome>)> = ops
        .into_iter()
        .map(|op| {
            counts[op.operation_type as usize] += 1;
            let pk = match op.partition_key {
                Some(raw) => match batch_operation_key(raw) {
                    Some(pk) => Some(pk),
                    None => {
                        return (
                            op.operation_type,
                            Err(Outcome::error(
                                400,
                                0,
                                0.0,
                                format!("invalid partitionKey {}", String::from_utf8_lossy(raw)),
                            )),
                        );
                    }
                },
                None => header_pk.clone(),
            };
            let pre = Preconditions {
                if_match: op.if_match,
                if_none_match: op.if_none_match,
            };
            (
                op.operation_type,
                address(
                    ctx,
                    op.operation_type,
                    op.id.as_deref(),
                    pk,
                    op.resource_body,
                    pre,
                ),
            )
        })
        .collect();
    for (kind, n) in [
        OperationType::Create,
        OperationType::Upsert,
        OperationType::Read,
        OperationType::Delete,
        OperationType::Replace,
        OperationType::Patch,
    ]
    .into_iter()
    .map(|k| (k, counts[k as usize]))
    {
        if n > 0 {
            shared.counters.operations(op_kind(kind), n);
        }
    }
    let ranges = ctx.container.ranges.read();
    let (outcomes, status) = if atomic {
        let Some(pk) = header_pk else {
            return Reply::error(
                400,
                0,
                "A transactional batch needs the partition key header.",
            );
        };
        if let Some(i) = addressed
            .iter()
            .position(|(_, a)| a.as_ref().map_or(true, |a| a.pk != pk))
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
            (outcomes, status)
        } else {
            let ops: Vec<Addressed<'_>> =
                addressed.into_iter().filter_map(|(_, a)| a.ok()).collect();
            let range = ranges.for_epk(pk.epk);
            ctx.execute_atomic(&mut range.part.lock(), ops)
        }
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
                    part.counters.throttled += 1;
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
    };
    drop(ranges);
    let charge: f64 = outcomes.iter().map(|o| o.charge).sum();
    let mut out = Vec::with_capacity(
        outcomes.len() * 96
            + if minimal {
                0
            } else {
                body.len() + outcomes.len() * 160
            },
    );
    write_results(&outcomes, minimal, &mut out);
    let mut reply = Reply::json(status, (charge * 100.0).round() / 100.0, out);
    if status == 429 {
        reply.substatus = cosmos_wire::status::SUB_RU_BUDGET_EXCEEDED;
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

fn run_query(shared: &Shared, ctx: &Ctx<'_>, headers: &HeaderMap, body: &[u8]) -> Reply {
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
    shared.counters.operations("query", 1);
    let mut part = range.part.lock();
    let page = match &pk {
        Some(pk) => {
            let docs = part
                .docs
                .get(&pk.canonical)
                .into_iter()
                .flat_map(|l| l.values());
            query::execute(&q, &params, docs, start, max_items)
        }
        None => query::execute(
            &q,
            &params,
            part.docs.values().flat_map(|l| l.values()),
            start,
            max_items,
        ),
    };
    let mut out = Vec::new();
    let returned = query::write_feed(&page.items, &mut out);
    let charge = ru::query(page.scanned, returned);
    if let Err(wait) = part.bucket.try_take(charge) {
        part.counters.throttled += 1;
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

fn query_plan_body(q: &query::parse::Query) -> Value {
    json!({
        "partitionedQueryExecutionInfoVersion": 2,
        "queryInfo": {
            "distinctType": "None", "top": q.top, "offset": null, "limit": null,
            "orderBy": [], "orderByExpressions": [], "groupByExpressions": [], "groupByAliases": [],
            "aggregates": [], "groupByAliasToAggregateType": {}, "rewrittenQuery": "",
            "hasSelectValue": matches!(q.projection, query::parse::Projection::Value(_)),
            "dCountInfo": null, "hasNonStreamingOrderBy": false
        },
        "queryRanges": [{"min": "", "max": "FF", "isMinInclusive": true, "isMaxInclusive": false}]
    })
}

fn query_plan(q: &query::parse::Query) -> Reply {
    if q.order_by.is_some() || q.offset_limit.is_some() {
        return Reply::error(
            400,
            0,
            "cosmos-sim runs ORDER BY and OFFSET/LIMIT on one partition only: give a partition key or a range id.",
        );
    }
    Reply::value(200, 0.0, &query_plan_body(q))
}

fn cross_partition_error(q: &query::parse::Query) -> Reply {
    let body = json!({
        "code": "BadRequest",
        "message": "The provided cross partition query can not be directly served by the gateway. This is a first chance (internal) exception that all newer clients will know how to handle gracefully. This exception is traced, but unless you see it bubble up as an exception (which only happens on older SDK clients), then you can safely ignore this message.",
        "additionalErrorInfo": query_plan_body(q).to_string(),
    });
    let mut r = Reply::value(400, 0.0, &body);
    r.substatus = 1004;
    r
}

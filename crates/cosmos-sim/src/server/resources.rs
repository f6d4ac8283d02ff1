//! The account and its resources above documents: the account document, databases and
//! containers (list, create, read, delete) and a container's partition key range map.

use super::headers::header;
use super::reply::Reply;
use crate::endpoint_state::EndpointState;
use crate::ru;
use crate::store::{Container, CreateError};
use cosmos_wire::headers as h;
use cosmos_wire::resources::PartitionKeyRanges;
use http::HeaderMap;
use serde_json::{Value, json};

/// `GET /`: the account, its one location at the address the client used.
pub(super) fn account(state: &EndpointState, headers: &HeaderMap) -> Reply {
    let host = header(headers, "host").map_or_else(|| state.addr.to_string(), str::to_string);
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

/// `GET /dbs`.
pub(super) fn list_databases(state: &EndpointState) -> Reply {
    let dbs: Vec<Value> = state
        .store
        .databases
        .read()
        .values()
        .map(|d| d.body.clone())
        .collect();
    feed("Databases", dbs)
}

/// `POST /dbs`.
pub(super) fn create_database(state: &EndpointState, body: &[u8]) -> Reply {
    let Some(id) = parse_json(body)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
    else {
        return Reply::error(400, 0, "The database definition needs a string \"id\".");
    };
    match state.store.create_database(&id) {
        Ok(db) => Reply::value(201, ru::METADATA, &db.body),
        Err(e) => create_error(e, "database"),
    }
}

/// `GET /dbs/{db}`.
pub(super) fn read_database(state: &EndpointState, db: &str) -> Reply {
    match state.store.database(db) {
        Some(d) => Reply::value(200, ru::METADATA, &d.body),
        None => not_found("database", db),
    }
}

/// `DELETE /dbs/{db}`.
pub(super) fn delete_database(state: &EndpointState, db: &str) -> Reply {
    match state.store.databases.write().remove(db) {
        Some(_) => Reply::json(204, ru::METADATA, Vec::new()),
        None => not_found("database", db),
    }
}

/// `GET /dbs/{db}/colls`.
pub(super) fn list_containers(state: &EndpointState, db: &str) -> Reply {
    match state.store.database(db) {
        Some(d) => feed(
            "DocumentCollections",
            d.containers
                .read()
                .values()
                .map(|c| c.body.clone())
                .collect(),
        ),
        None => not_found("database", db),
    }
}

/// `POST /dbs/{db}/colls`, with its throughput from `x-ms-offer-throughput` or the default.
pub(super) fn create_container(
    state: &EndpointState,
    db: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Reply {
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
        None => state.default_ru,
    };
    match state
        .store
        .create_container(db, &definition, state.partitions, ru)
    {
        Ok(c) => Reply::value(201, ru::METADATA, &c.body),
        Err(e) => create_error(e, "container"),
    }
}

/// `GET /dbs/{db}/colls/{coll}`.
pub(super) fn read_container(state: &EndpointState, db: &str, coll: &str) -> Reply {
    match state.store.container(db, coll) {
        Some(c) => Reply::value(200, ru::METADATA, &c.body),
        None => not_found("container", coll),
    }
}

/// `DELETE /dbs/{db}/colls/{coll}`.
pub(super) fn delete_container(state: &EndpointState, db: &str, coll: &str) -> Reply {
    match state.store.delete_container(db, coll) {
        Some(_) => Reply::json(204, ru::METADATA, Vec::new()),
        None => not_found("container", coll),
    }
}

/// `GET .../colls/{coll}/pkranges`: the live ranges; the ETag changes with every split.
pub(super) fn pkranges(c: &Container) -> Reply {
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

/// The 404 of a database or container.
pub(super) fn not_found(what: &str, id: &str) -> Reply {
    Reply::error(
        404,
        0,
        format!("Resource Not Found: {what} {id:?} does not exist."),
    )
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

//! Reading the request headers the handlers act on: flags, the partition key, the priority,
//! preconditions.

use super::reply::Reply;
use crate::document_ops::Preconditions;
use crate::store::PartitionKey;
use cosmos_wire::headers as h;
use cosmos_wire::priority::Priority;
use http::HeaderMap;

/// A header's value, if it is text.
pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether a flag header is `true` (any case).
pub(super) fn is_true(headers: &HeaderMap, name: &str) -> bool {
    header(headers, name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Whether a `POST .../docs` is a query (by its flag or its content type).
pub(super) fn is_query(headers: &HeaderMap) -> bool {
    is_true(headers, h::IS_QUERY)
        || header(headers, "content-type").is_some_and(|v| v.starts_with("application/query+json"))
}

/// Whether the client asked for no document in write responses.
pub(super) fn is_minimal(headers: &HeaderMap) -> bool {
    header(headers, "prefer").is_some_and(|v| v.contains("return=minimal"))
}

/// The partition key header, if any; a 400 if it is not a key.
pub(super) fn header_pk(headers: &HeaderMap) -> Result<Option<PartitionKey>, Reply> {
    match header(headers, h::PARTITION_KEY) {
        None => Ok(None),
        Some(raw) => PartitionKey::from_header(raw).map(Some).ok_or_else(|| {
            Reply::error(400, 0, format!("The partition key header {raw:?} is not a JSON array of one value, e.g. [\"drone-42\"] (or [{{}}] for the undefined key)."))
        }),
    }
}

/// The request's priority (`x-ms-cosmos-priority-level`; high when absent); a 400 for a value
/// other than `High` or `Low`.
pub(super) fn priority(headers: &HeaderMap) -> Result<Priority, Reply> {
    match header(headers, h::PRIORITY_LEVEL) {
        None => Ok(Priority::High),
        Some(raw) => Priority::from_header_value(raw).ok_or_else(|| {
            Reply::error(
                400,
                0,
                format!(
                    "The priority level {raw:?} is not High or Low ({}).",
                    h::PRIORITY_LEVEL
                ),
            )
        }),
    }
}

/// The ETag preconditions of a point operation.
pub(super) fn preconditions(headers: &HeaderMap) -> Preconditions {
    Preconditions {
        if_match: header(headers, h::IF_MATCH).map(str::to_string),
        if_none_match: header(headers, h::IF_NONE_MATCH).map(str::to_string),
    }
}

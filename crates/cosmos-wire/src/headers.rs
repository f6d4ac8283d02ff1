//! Names of the HTTP headers of the Cosmos DB REST API (all lowercase, as HTTP/2 sends them).

/// Request date, RFC 1123; part of the signed string.
pub const DATE: &str = "x-ms-date";
/// REST API version.
pub const VERSION: &str = "x-ms-version";
/// Partition key of a point operation or single-partition query: a JSON array such as `["drone-42"]`.
pub const PARTITION_KEY: &str = "x-ms-documentdb-partitionkey";
/// Targets one partition key range (bulk batches, per-range queries).
pub const PARTITION_KEY_RANGE_ID: &str = "x-ms-documentdb-partitionkeyrangeid";
/// `True` makes a document POST an upsert.
pub const IS_UPSERT: &str = "x-ms-documentdb-is-upsert";
/// `True` marks a document POST as a query (with `Content-Type: application/query+json`).
pub const IS_QUERY: &str = "x-ms-documentdb-isquery";
/// Allows a query to run on a range when the partition key is not given.
pub const QUERY_ENABLE_CROSS_PARTITION: &str = "x-ms-documentdb-query-enablecrosspartition";
/// Maximum number of items in one page of a feed or query.
pub const MAX_ITEM_COUNT: &str = "x-ms-max-item-count";
/// Continuation token of a feed or query.
pub const CONTINUATION: &str = "x-ms-continuation";
/// `True` marks a document POST as a batch.
pub const IS_BATCH_REQUEST: &str = "x-ms-cosmos-is-batch-request";
/// `True` for a transactional (all-or-nothing) batch, `False` for bulk.
pub const BATCH_ATOMIC: &str = "x-ms-cosmos-batch-atomic";
/// `True` lets a non-atomic batch go on after a failed operation.
pub const BATCH_CONTINUE_ON_ERROR: &str = "x-ms-cosmos-batch-continue-on-error";
/// Priority-based execution: `High` (the default when absent) or `Low`
/// ([`crate::priority::Priority`]).
pub const PRIORITY_LEVEL: &str = "x-ms-cosmos-priority-level";
/// Request units charged for the request.
pub const REQUEST_CHARGE: &str = "x-ms-request-charge";
/// On 429: how long to wait before retrying, in milliseconds.
pub const RETRY_AFTER_MS: &str = "x-ms-retry-after-ms";
/// The substatus that refines the HTTP status.
pub const SUBSTATUS: &str = "x-ms-substatus";
/// The server's id for the request, for support and logs.
pub const ACTIVITY_ID: &str = "x-ms-activity-id";
/// Session consistency token.
pub const SESSION_TOKEN: &str = "x-ms-session-token";
/// Number of items in a feed or query page.
pub const ITEM_COUNT: &str = "x-ms-item-count";
/// Offer throughput (RU/s) given when creating a container.
pub const OFFER_THROUGHPUT: &str = "x-ms-offer-throughput";
/// Answers `GET /` and point reads with the resource's entity tag.
pub const ETAG: &str = "etag";
/// Precondition: the write applies only if the resource's ETag matches.
pub const IF_MATCH: &str = "if-match";
/// Precondition: the read answers 304 if the ETag matches.
pub const IF_NONE_MATCH: &str = "if-none-match";

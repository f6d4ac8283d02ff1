//! Reads with a cost account: queries fanned out over partition key ranges with a bounded
//! degree of parallelism (or serially), and point reads, each reporting the RU, the HTTP
//! calls (retries included) and the 429s it took, even when it fails.
//!
//! What a fan-out does:
//! - one task per range, at most `max_parallelism` at once, each following its range's
//!   continuation pages; the results are merged in range order (a concatenation: `ORDER BY`,
//!   `TOP` and aggregates apply within each range only);
//! - a 429 is retried after the server's `x-ms-retry-after-ms`, other transient failures
//!   with backoff, both under the client's [`RetryPolicy`](crate::RetryPolicy);
//! - a range that answers 410/1002 (split, merge, migration) loses what it had returned so
//!   far; the range map is re-read and the ranges that now cover its span run again (the
//!   whole fan-out runs again if the new ranges reach outside that span).
//!
//! [`ContainerClient::query`] is the plain form, for the callers that only want documents:
//! every range at once, the cost reported only when the query succeeds.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;
use cosmos_wire::epk::boundary_to_u128;
use cosmos_wire::headers;
use cosmos_wire::resources::{DocumentFeed, PartitionKeyRange, QueryRequest};
use cosmos_wire::status::{Disposition, disposition};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use reqwest::Method;
use serde_json::Value;

use crate::container::decode;
use crate::query::{QueryResponse, QueryScope};
use crate::ranges::RangeMap;
use crate::request::{RawResponse, RequestSpec};
use crate::{ContainerClient, CosmosError, PartitionKey, ReadResponse};

/// How a query runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryOptions {
    /// Ranges queried at once in a fan-out (1: one after the other). At least 1.
    pub max_parallelism: usize,
    /// `x-ms-max-item-count`: results per page (`None`: the server's default).
    pub max_item_count: Option<u32>,
}

impl Default for QueryOptions {
    /// 16 ranges at once, the server's page size.
    fn default() -> Self {
        Self {
            max_parallelism: 16,
            max_item_count: None,
        }
    }
}

/// What a read cost.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReadCost {
    /// RU charged over every call.
    pub request_charge: f64,
    /// HTTP requests sent: pages times ranges, plus retries.
    pub calls: u32,
    /// Calls answered 429.
    pub throttled: u32,
    /// Times the range map was re-read because a range moved.
    pub range_refreshes: u32,
    /// Most ranges queried at the same moment.
    pub peak_parallelism: usize,
}

impl ReadCost {
    fn absorb(&mut self, other: &ReadCost) {
        self.request_charge += other.request_charge;
        self.calls += other.calls;
        self.throttled += other.throttled;
        self.range_refreshes += other.range_refreshes;
        self.peak_parallelism = self.peak_parallelism.max(other.peak_parallelism);
    }
}

/// The documents of a query and what they cost.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CountedQuery {
    /// The documents (or projected values), in range order.
    pub documents: Vec<Value>,
    /// What the query cost.
    pub cost: ReadCost,
}

/// A read that failed, with what it cost until then.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct ReadFailure {
    /// Why it failed.
    #[source]
    pub source: CosmosError,
    /// What it cost.
    pub cost: ReadCost,
}

/// How often a fan-out re-reads the range map before giving up.
const MAX_RANGE_REFRESHES: u32 = 3;

/// Where one page request goes.
#[derive(Clone, Copy)]
enum Target<'a> {
    Partition(&'a PartitionKey),
    Range(&'a str),
}

/// One range of a fan-out still to query: its id and its EPK span.
#[derive(Debug, Clone)]
struct RangeWork {
    id: String,
    span: (u128, u128),
}

impl RangeWork {
    fn of(range: &PartitionKeyRange) -> Result<Self, CosmosError> {
        let bound = |b: &str| {
            boundary_to_u128(b).ok_or_else(|| {
                CosmosError::Protocol(format!("range {} has an invalid boundary {b:?}", range.id))
            })
        };
        Ok(Self {
            id: range.id.clone(),
            span: (bound(&range.min_inclusive)?, bound(&range.max_exclusive)?),
        })
    }

    fn all(map: &RangeMap) -> Result<VecDeque<Self>, CosmosError> {
        map.ranges().iter().map(Self::of).collect()
    }
}

impl ContainerClient {
    /// Runs a query on one logical partition or on every range (all at once) and returns
    /// its documents, the RU and the calls it took.
    pub async fn query(
        &self,
        query: &QueryRequest,
        scope: QueryScope,
    ) -> Result<QueryResponse, CosmosError> {
        let options = QueryOptions {
            max_parallelism: usize::MAX,
            max_item_count: None,
        };
        let counted = self
            .query_counted(query, &scope, &options)
            .await
            .map_err(|failure| failure.source)?;
        Ok(QueryResponse {
            documents: counted.documents,
            request_charge: counted.cost.request_charge,
            calls: counted.cost.calls,
        })
    }

    /// Runs a query on one logical partition or on every range, as `options` say, and
    /// reports what it cost (also when it fails).
    pub async fn query_counted(
        &self,
        query: &QueryRequest,
        scope: &QueryScope,
        options: &QueryOptions,
    ) -> Result<CountedQuery, ReadFailure> {
        let body = Bytes::from(serde_json::to_vec(query).expect("a query serializes"));
        let cost = Mutex::new(ReadCost::default());
        let result = match scope {
            QueryScope::Partition(key) => {
                let key = PartitionKey::from(key);
                self.pages(&body, Target::Partition(&key), options, &cost)
                    .await
            }
            QueryScope::AllRanges => self.fan_out(&body, options, &cost).await,
        };
        let cost = cost.into_inner().expect("cost lock is never poisoned");
        match result {
            Ok(documents) => Ok(CountedQuery { documents, cost }),
            Err(source) => Err(ReadFailure { source, cost }),
        }
    }

    /// Reads one document by id (one call unless retried); `None` if it does not exist.
    pub async fn read_counted(
        &self,
        partition_key: impl Into<PartitionKey>,
        id: &str,
    ) -> Result<(Option<ReadResponse>, ReadCost), ReadFailure> {
        let mut cost = ReadCost::default();
        let spec =
            self.document_request(Method::GET, self.doc_path(id), partition_key.into(), None);
        let result = match spec {
            Ok(spec) => self.send_counted(&spec, &mut cost).await,
            Err(e) => Err(e),
        };
        let answer = match result {
            Ok(r) if r.status == 404 => Ok(None),
            Ok(r) => r.into_result().map(|r| Some(r.into())),
            Err(e) => Err(e),
        };
        cost.peak_parallelism = 1;
        match answer {
            Ok(doc) => Ok((doc, cost)),
            Err(source) => Err(ReadFailure { source, cost }),
        }
    }

    /// Queries every range, at most `options.max_parallelism` at once.
    async fn fan_out(
        &self,
        body: &Bytes,
        options: &QueryOptions,
        cost: &Mutex<ReadCost>,
    ) -> Result<Vec<Value>, CosmosError> {
        let limit = options.max_parallelism.max(1);
        let mut map = self.range_map().await?;
        let mut todo = RangeWork::all(&map)?;
        // Results by the lower boundary of the span they cover.
        let mut done: BTreeMap<u128, Vec<Value>> = BTreeMap::new();
        let mut running = FuturesUnordered::new();
        let mut refreshes = 0;
        loop {
            while running.len() < limit
                && let Some(work) = todo.pop_front()
            {
                running.push(async move {
                    let result = self
                        .pages(body, Target::Range(&work.id), options, cost)
                        .await;
                    (work, result)
                });
                let mut c = cost.lock().expect("cost lock is never poisoned");
                c.peak_parallelism = c.peak_parallelism.max(running.len());
            }
            let Some((work, result)) = running.next().await else {
                break;
            };
            let error = match result {
                Ok(documents) => {
                    done.insert(work.span.0, documents);
                    continue;
                }
                Err(e) => e,
            };
            if error.disposition() != Disposition::RangeGone || refreshes >= MAX_RANGE_REFRESHES {
                return Err(error);
            }
            refreshes += 1;
            cost.lock()
                .expect("cost lock is never poisoned")
                .range_refreshes += 1;
            map = self.refresh_range_map(Some(&map)).await?;
            let covering: Vec<RangeWork> = RangeWork::all(&map)?
                .into_iter()
                .filter(|r| r.span.0 < work.span.1 && work.span.0 < r.span.1)
                .collect();
            if covering
                .iter()
                .all(|r| r.span.0 >= work.span.0 && r.span.1 <= work.span.1)
            {
                tracing::debug!(range = %work.id, children = covering.len(), "range moved during a query: querying the ranges that cover it");
                todo.extend(covering);
            } else {
                // The new ranges reach past the moved one's span (a merge): start over.
                tracing::debug!(range = %work.id, "ranges merged during a query: querying every range again");
                running.clear();
                done.clear();
                todo = RangeWork::all(&map)?;
            }
        }
        Ok(done.into_values().flatten().collect())
    }

    /// All pages of a query on one target, following continuation tokens.
    async fn pages(
        &self,
        body: &Bytes,
        target: Target<'_>,
        options: &QueryOptions,
        cost: &Mutex<ReadCost>,
    ) -> Result<Vec<Value>, CosmosError> {
        let mut documents = Vec::new();
        let mut continuation: Option<String> = None;
        loop {
            let mut spec = RequestSpec::new(Method::POST, self.docs_path())
                .header(headers::IS_QUERY, "True")?
                .header("content-type", "application/query+json")?
                .body(body.clone())
                .idempotent(true);
            spec = match target {
                Target::Partition(key) => spec.header(headers::PARTITION_KEY, &key.to_json())?,
                Target::Range(id) => spec
                    .header(headers::PARTITION_KEY_RANGE_ID, id)?
                    .header(headers::QUERY_ENABLE_CROSS_PARTITION, "True")?
                    .retry_range_gone(false),
            };
            if let Some(n) = options.max_item_count {
                spec = spec.header(headers::MAX_ITEM_COUNT, &n.to_string())?;
            }
            if let Some(token) = &continuation {
                spec = spec.header(headers::CONTINUATION, token)?;
            }
            let mut call_cost = ReadCost::default();
            let response = self.send_counted(&spec, &mut call_cost).await;
            cost.lock()
                .expect("cost lock is never poisoned")
                .absorb(&call_cost);
            let response = response?.into_result()?;
            let page: DocumentFeed = decode(&response.body, "query")?;
            documents.extend(page.documents);
            match response.continuation {
                Some(token) if !token.is_empty() => continuation = Some(token),
                _ => return Ok(documents),
            }
        }
    }

    /// Sends a read request through the client's retry loop, counting every call, its RU and
    /// its 429s. A range move of a range-targeted request is returned to the caller, which
    /// re-routes.
    async fn send_counted(
        &self,
        spec: &RequestSpec,
        cost: &mut ReadCost,
    ) -> Result<RawResponse, CosmosError> {
        self.client()
            .execute_observed(spec, |attempt| {
                cost.calls += 1;
                if let Ok(r) = attempt {
                    cost.request_charge += r.request_charge;
                    if disposition(r.status, r.substatus) == Disposition::Throttled {
                        cost.throttled += 1;
                    }
                }
            })
            .await
    }
}

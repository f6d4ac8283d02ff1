//! The change feed of a container in latest-version mode (`GET .../docs` with `A-IM:
//! Incremental Feed`), read one partition key range at a time from a continuation: the
//! latest version of each document changed since, a page at a time, and nothing (a `304`)
//! when nothing changed. The continuation is the `etag` of the last page. A range that split
//! answers 410 with substatus 1002; its children ([`crate::RangeMap`] names their parents)
//! go on from the same continuation.

use cosmos_wire::headers;
use cosmos_wire::resources::DocumentFeed;
use reqwest::Method;
use serde_json::Value;

use crate::container::decode;
use crate::request::RequestSpec;
use crate::{ContainerClient, CosmosError};

/// The `A-IM` value of the latest-version change feed.
const INCREMENTAL_FEED: &str = "Incremental Feed";

/// Where a range's feed is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedPosition {
    /// Every document, from the container's beginning.
    Beginning,
    /// Only changes made from now on.
    Now,
    /// After a page's continuation (its `etag`).
    After(String),
}

/// One page of a range's changes.
#[derive(Debug, Clone)]
pub struct FeedPage {
    /// The latest version of each changed document, in the order of their changes (empty:
    /// nothing changed).
    pub documents: Vec<Value>,
    /// Where the next page starts.
    pub next: FeedPosition,
    /// RU the page cost.
    pub request_charge: f64,
}

impl ContainerClient {
    /// The next page of range `range_id`'s changes from `from`, at most `max_items`
    /// documents. A split range is an error with status 410 and substatus 1002
    /// ([`CosmosError::is_range_gone`]): read its children from the same position.
    pub async fn change_feed_page(
        &self,
        range_id: &str,
        from: &FeedPosition,
        max_items: Option<u32>,
    ) -> Result<FeedPage, CosmosError> {
        let mut spec = RequestSpec::new(Method::GET, self.docs_path())
            .header("a-im", INCREMENTAL_FEED)?
            .header(headers::PARTITION_KEY_RANGE_ID, range_id)?
            .retry_range_gone(false);
        spec = match from {
            FeedPosition::Beginning => spec,
            FeedPosition::Now => spec.header(headers::IF_NONE_MATCH, "*")?,
            FeedPosition::After(etag) => spec.header(headers::IF_NONE_MATCH, etag)?,
        };
        if let Some(n) = max_items {
            spec = spec.header(headers::MAX_ITEM_COUNT, &n.to_string())?;
        }
        let response = self.client().execute(&spec).await?;
        let next = match &response.etag {
            Some(etag) => FeedPosition::After(etag.clone()),
            None => from.clone(),
        };
        if response.status == 304 {
            return Ok(FeedPage {
                documents: Vec::new(),
                next,
                request_charge: response.request_charge,
            });
        }
        let response = response.into_result()?;
        let page: DocumentFeed = decode(&response.body, "change feed")?;
        Ok(FeedPage {
            documents: page.documents,
            next,
            request_charge: response.request_charge,
        })
    }
}

//! The leases of the change feed processor's pattern, in the lease container (partition key
//! `/id`): one document per partition key range of the positions container, holding its
//! owner, its continuation and when the owner last renewed it. Every write is conditional on
//! the document's ETag, so of two instances that write the same lease one wins and the other
//! learns it lost the lease (412).
//!
//! [`balance`] is the choice of leases to take, a pure function: an instance owns at least
//! its fair share (the leases over the instances alive), takes expired or free leases first
//! and steals one per round from the instance that holds the most above its share.
//!
//! A range that split hands its lease to its children ([`LeaseStore::split`]): a lease each,
//! from the parent's continuation, which the next balancing round hands out.
//!
//! Cost (RU): a renewal is a replace of a ~300-byte document, about 6 RU (10 s interval: 0.6
//! RU/s per range); a balancing round reads every lease, one query (a few RU); a checkpoint
//! is a replace, ~6 RU, written only after a page that had changes.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cosmos::{ContainerClient, CosmosError, PartitionKeyRange, QueryRequest, QueryScope, RangeMap};
use serde::{Deserialize, Serialize};

/// The id prefix of lease documents.
const PREFIX: &str = "lease.";

/// One range's lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// `lease.{range id}`.
    pub id: String,
    /// Always `lease`.
    pub kind: String,
    /// The partition key range of the positions container.
    pub range: String,
    /// The instance that holds it; none: free.
    pub owner: Option<String>,
    /// Where the range's feed goes on (the etag of the last page handled); none: not read yet.
    pub continuation: Option<String>,
    /// When the owner last wrote it, Unix ms.
    pub renewed_at_ms: i64,
    /// The document's ETag, the condition of the next write.
    #[serde(rename = "_etag", default, skip_serializing)]
    pub etag: Option<String>,
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Lease {
    /// Whether its owner stopped renewing it `expiry` ago, or it has none.
    pub fn is_free(&self, now_ms: i64, expiry: Duration) -> bool {
        self.owner.is_none() || now_ms - self.renewed_at_ms > expiry.as_millis() as i64
    }
}

/// The leases in their container.
#[derive(Debug, Clone)]
pub struct LeaseStore {
    container: ContainerClient,
}

impl LeaseStore {
    /// The leases in `container`.
    pub fn new(container: ContainerClient) -> Self {
        LeaseStore { container }
    }

    /// Creates the lease of every range of `ranges` that has none.
    pub async fn ensure(&self, ranges: &RangeMap) -> Result<(), CosmosError> {
        for range in ranges.ranges() {
            let lease = Lease {
                id: format!("{PREFIX}{}", range.id),
                kind: "lease".into(),
                range: range.id.clone(),
                owner: None,
                continuation: None,
                renewed_at_ms: 0,
                etag: None,
            };
            let body = serde_json::to_vec(&lease).expect("a lease serializes");
            match self.container.create(lease.id.as_str(), &body).await {
                Ok(_) => tracing::info!(range = %range.id, "lease created"),
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Hands a split range's lease to its `children`: a free lease each, from `continuation`
    /// (a continuation stays good for both children), then the parent's lease deleted.
    pub async fn split(
        &self,
        parent: &Lease,
        continuation: Option<String>,
        children: &[PartitionKeyRange],
    ) -> Result<(), CosmosError> {
        for child in children {
            let lease = Lease {
                id: format!("{PREFIX}{}", child.id),
                kind: "lease".into(),
                range: child.id.clone(),
                owner: None,
                continuation: continuation.clone(),
                renewed_at_ms: 0,
                etag: None,
            };
            let body = serde_json::to_vec(&lease).expect("a lease serializes");
            match self.container.create(lease.id.as_str(), &body).await {
                Ok(_) => {
                    tracing::info!(parent = %parent.range, range = %child.id, "lease of a child range created")
                }
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
        match self
            .container
            .delete(parent.id.as_str(), &parent.id, parent.etag.as_deref())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() || e.is_precondition_failed() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every lease, and what reading them cost (RU).
    pub async fn all(&self) -> Result<(Vec<Lease>, f64), CosmosError> {
        let query = QueryRequest {
            query: "SELECT * FROM c WHERE c.kind = 'lease'".into(),
            parameters: Vec::new(),
        };
        let answer = self.container.query(&query, QueryScope::AllRanges).await?;
        let leases = answer
            .documents
            .into_iter()
            .filter_map(|d| serde_json::from_value(d).ok())
            .collect();
        Ok((leases, answer.request_charge))
    }

    /// Writes `lease` if its ETag still matches: the written lease and the RU, or none when
    /// another instance wrote it meanwhile (412).
    pub async fn write(&self, lease: &Lease) -> Result<(Option<Lease>, f64), CosmosError> {
        let mut next = lease.clone();
        next.renewed_at_ms = now_ms();
        let body = serde_json::to_vec(&next).expect("a lease serializes");
        match self
            .container
            .replace(lease.id.as_str(), &lease.id, &body, lease.etag.as_deref())
            .await
        {
            Ok(written) => {
                next.etag = written.etag;
                Ok((Some(next), written.request_charge))
            }
            Err(e) if e.is_precondition_failed() => Ok((None, 0.0)),
            Err(e) => Err(e),
        }
    }
}

/// The leases `me` should take now, by id: free ones up to its fair share, else one stolen
/// from the instance with the most, if that one holds more than its share.
pub fn balance(leases: &[Lease], me: &str, now_ms: i64, expiry: Duration) -> Vec<String> {
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    held.insert(me, 0);
    for lease in leases {
        if let (false, Some(owner)) = (lease.is_free(now_ms, expiry), lease.owner.as_deref()) {
            *held.entry(owner).or_default() += 1;
        }
    }
    let share = leases.len().div_ceil(held.len());
    let mine = held[me];
    if mine >= share {
        return Vec::new();
    }
    let free: Vec<String> = leases
        .iter()
        .filter(|l| l.is_free(now_ms, expiry))
        .map(|l| l.id.clone())
        .take(share - mine)
        .collect();
    if !free.is_empty() {
        return free;
    }
    let Some((&richest, &most)) = held.iter().max_by_key(|(_, n)| **n) else {
        return Vec::new();
    };
    if richest == me || most <= share {
        return Vec::new();
    }
    leases
        .iter()
        .find(|l| l.owner.as_deref() == Some(richest))
        .map(|l| vec![l.id.clone()])
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(range: usize, owner: Option<&str>, renewed_at_ms: i64) -> Lease {
        Lease {
            id: format!("{PREFIX}{range}"),
            kind: "lease".into(),
            range: range.to_string(),
            owner: owner.map(str::to_string),
            continuation: None,
            renewed_at_ms,
            etag: None,
        }
    }

    const EXPIRY: Duration = Duration::from_secs(60);

    #[test]
    fn a_lone_instance_takes_every_free_lease() {
        let leases: Vec<Lease> = (0..4).map(|r| lease(r, None, 0)).collect();
        assert_eq!(balance(&leases, "a", 1_000, EXPIRY).len(), 4);
    }

    #[test]
    fn a_second_instance_steals_one_at_a_time_up_to_its_share() {
        let now = 100_000;
        let mut leases: Vec<Lease> = (0..4).map(|r| lease(r, Some("a"), now)).collect();
        let took = balance(&leases, "b", now, EXPIRY);
        assert_eq!(took.len(), 1);
        leases[0].owner = Some("b".into());
        assert_eq!(balance(&leases, "b", now, EXPIRY).len(), 1);
        leases[1].owner = Some("b".into());
        assert!(balance(&leases, "b", now, EXPIRY).is_empty());
        assert!(balance(&leases, "a", now, EXPIRY).is_empty());
    }

    #[test]
    fn the_leases_of_an_instance_that_stopped_renewing_are_taken_over() {
        let now = 1_000_000;
        let leases = vec![
            lease(0, Some("a"), now),
            lease(1, Some("a"), now),
            lease(2, Some("dead"), now - 61_000),
            lease(3, Some("dead"), now - 61_000),
        ];
        let mut took = balance(&leases, "a", now, EXPIRY);
        took.sort();
        assert_eq!(took, ["lease.2", "lease.3"]);
    }
}

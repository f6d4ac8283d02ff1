//! Priority-based execution over HTTP: when a partition's budget runs short, requests marked
//! `x-ms-cosmos-priority-level: Low` are throttled while high-priority ones (marked `High`, or
//! unmarked) are still served from what low priority may not draw; the 429s are counted by
//! priority; a value other than `High` or `Low` is refused.

mod common;

use common::{Rest, start};
use cosmos_wire::batch::partition_key_json;
use cosmos_wire::headers as h;
use reqwest::Method;
use std::time::Duration;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A point read of a missing document (1 RU) at `priority` (`None`: no header).
async fn read(rest: &Rest, priority: Option<&str>) -> u16 {
    let mut headers = vec![(h::PARTITION_KEY, partition_key_json("drone-1"))];
    if let Some(p) = priority {
        headers.push((h::PRIORITY_LEVEL, p.to_string()));
    }
    let r = rest
        .send(Method::GET, "/dbs/db/colls/c/docs/missing", &headers, None)
        .await;
    if r.status == 429 {
        assert_eq!(r.header(h::SUBSTATUS), Some("3200"));
        assert!(r.header(h::RETRY_AFTER_MS).is_some());
    }
    r.status.as_u16()
}

/// Low priority reads until its first 429; the reads it had served.
async fn low_until_throttled(rest: &Rest) -> usize {
    for served in 0..1000 {
        match read(rest, Some("Low")).await {
            404 => {}
            429 => return served,
            other => panic!("unexpected {other}"),
        }
    }
    panic!("low priority was never throttled");
}

#[tokio::test]
async fn low_priority_is_throttled_first_and_high_priority_still_served() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // One partition of 20 RU/s: a full bucket of 20 RU, 10 of them kept for high priority.
        let (sim, rest) = start(1, 20.0).await;
        let served = low_until_throttled(&rest).await;
        assert!((9..=40).contains(&served), "{served}");
        // The bucket holds at least the reserve: 9 high-priority reads of 1 RU fit whatever the
        // clock did meanwhile (it only adds), marked or unmarked.
        for i in 0..9 {
            let priority = if i % 2 == 0 { Some("High") } else { None };
            assert_eq!(read(&rest, priority).await, 404, "high-priority read {i}");
        }
        let stats = sim.stats();
        assert!(stats.throttled_low_priority_requests >= 1);
        assert_eq!(
            stats.throttled_requests, stats.throttled_low_priority_requests,
            "no high-priority request was throttled"
        );
        assert_eq!(
            stats.throttled_operations,
            stats.throttled_low_priority_operations
        );
        assert!(stats.low_priority_requests > served as u64);
        let metrics = stats.to_prometheus();
        assert!(metrics.contains("cosmos_sim_partition_throttled_low_priority_total{"));
        sim.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn high_priority_may_empty_the_bucket() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, rest) = start(1, 20.0).await;
        let mut served = 0;
        while read(&rest, Some("High")).await == 404 {
            served += 1;
            assert!(served < 1000, "high priority was never throttled");
        }
        // It drew the whole bucket, the reserve included, before its first 429.
        assert!(served >= 19, "{served}");
        let stats = sim.stats();
        assert!(stats.throttled_requests >= 1);
        assert_eq!(stats.throttled_low_priority_requests, 0);
        assert_eq!(stats.low_priority_requests, 0);
        sim.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn an_unknown_priority_level_is_refused() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, rest) = start(1, 1000.0).await;
        assert_eq!(read(&rest, Some("Urgent")).await, 400);
        assert_eq!(read(&rest, Some("low")).await, 404);
        sim.shutdown().await;
    })
    .await
    .expect("test timed out");
}

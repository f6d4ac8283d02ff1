//! Reads held to budgets, against the local Cosmos endpoint: a caller over its RU budget gets
//! 429 with `Retry-After` before Cosmos DB is asked while another caller is still served; a
//! fan-out beyond the cap waits and then gets 503; the API's Cosmos DB requests carry the low
//! priority level (or high, when configured); geofence reads and a stream's snapshot are
//! charged; anonymous callers are budgeted by address, forwarded only by a trusted proxy.

mod common;

use std::time::Duration;

use common::*;
use cosmos::Priority;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::RuBudget;
use fleet_api::{Access, AccessConfig, ApiKeys, Role, key_line};
use serde_json::Value;
use test_harness::eventually;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The keys of the callers `storm` and `calm`.
const STORM: &str = "storm-key-0123456789abcdef0123456789";
const CALM: &str = "calm-key-0123456789abcdef0123456789ab";

/// A fleet of 60 drones on 4 ranges and the API over it, letting in the keys [`STORM`] and
/// [`CALM`], and anonymous callers.
async fn fleet(options: ApiOptions) -> (CosmosSim, String) {
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    seed_latest(&c, &scatter(60, 0x5eed)).await;
    let lines = [("storm", STORM), ("calm", CALM)]
        .map(|(name, key)| key_line(name, Role::Read, key).unwrap())
        .join("\n");
    let access = Access::start(AccessConfig {
        keys: ApiKeys::parse(&lines).unwrap(),
        oidc: None,
        anonymous: true,
    })
    .await
    .unwrap();
    let (base, _stop) = serve_with(c, options, access).await;
    (sim, base)
}

/// A near query as `key` (`None`: anonymous): status, `Retry-After`, body.
async fn near(base: &str, key: Option<&str>) -> (u16, Option<u64>, Value) {
    let url = format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=3000",
        HOME.1, HOME.0
    );
    let mut request = reqwest::Client::new().get(url);
    if let Some(key) = key {
        request = request.header("X-API-Key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let body = response.json().await.unwrap();
    (status, retry_after, body)
}

#[tokio::test]
async fn a_caller_over_its_budget_gets_429_before_cosmos_is_asked() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, base) = fleet(ApiOptions {
            ru_per_sec_per_identity: RuBudget::PerSec(20.0),
            ..ApiOptions::default()
        })
        .await;
        // A near query costs more than 9 RU (4 ranges of 2.3 at least): a budget of 20 RU/s is
        // spent within a few queries, faster than it refills.
        let mut served = 0;
        let (retry_after, body) = loop {
            let asked_before = sim.stats().requests;
            let (status, retry_after, body) = near(&base, Some(STORM)).await;
            if status == 429 {
                assert_eq!(
                    sim.stats().requests,
                    asked_before,
                    "Cosmos DB was not asked"
                );
                break (retry_after, body);
            }
            assert_eq!(status, 200, "{body}");
            served += 1;
            assert!(served < 200, "the budget never ran out");
        };
        assert!(served >= 1, "a full bucket lets the first query in");
        assert!(matches!(retry_after, Some(1..=60)), "{retry_after:?}");
        assert_eq!(body["error"], "over_budget", "{body}");
        // The others have budgets of their own (anonymous callers one per address).
        assert_eq!(near(&base, Some(CALM)).await.0, 200);
        assert_eq!(near(&base, None).await.0, 200);
        let metrics = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("fleet_api_refused_total{reason=\"identity_budget\"} 1"),
            "{metrics}"
        );
        sim.shutdown().await;
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_beyond_the_cap_waits_then_gets_503() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, base) = fleet(ApiOptions {
            max_concurrent_queries: 1,
            ru_per_sec_per_identity: RuBudget::Off,
            ..ApiOptions::default()
        })
        .await;
        // The first query holds the only slot while Cosmos DB takes 5 s to answer.
        sim.set_latency(Duration::from_secs(5));
        let first = tokio::spawn({
            let base = base.clone();
            async move { near(&base, Some(CALM)).await }
        });
        eventually(
            "the first query held by Cosmos DB",
            Duration::from_secs(30),
            async || sim.delayed_requests(),
            |&n| n > 0,
        )
        .await;
        let (status, retry_after, body) = near(&base, Some(STORM)).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(retry_after, Some(1));
        assert_eq!(body["error"], "busy", "{body}");
        assert_eq!(first.await.unwrap().0, 200);
        sim.set_latency(Duration::ZERO);
        assert_eq!(
            near(&base, Some(STORM)).await.0,
            200,
            "the slot is free again"
        );
        sim.shutdown().await;
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn the_api_asks_at_low_priority_unless_told_otherwise() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, base) = fleet(ApiOptions::default()).await;
        assert_eq!(sim.stats().low_priority_requests, 0, "the seeding was high");
        assert_eq!(near(&base, None).await.0, 200);
        assert!(
            sim.stats().low_priority_requests >= 4,
            "one call per range at least"
        );
        sim.shutdown().await;

        let (sim, base) = fleet(ApiOptions {
            priority: Priority::High,
            ..ApiOptions::default()
        })
        .await;
        assert_eq!(near(&base, None).await.0, 200);
        assert_eq!(sim.stats().low_priority_requests, 0);
        sim.shutdown().await;
    })
    .await
    .expect("the test finished within its time limit");
}

/// GET `path` as `key`: status and body.
async fn get_as(base: &str, path: &str, key: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .header("X-API-Key", key)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = if path.ends_with("/stream") {
        Value::Null
    } else {
        response.json().await.unwrap()
    };
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geofence_reads_and_the_streams_snapshot_are_held_to_the_budget() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, base) = fleet(ApiOptions {
            ru_per_sec_per_identity: RuBudget::PerSec(5.0),
            ..ApiOptions::default()
        })
        .await;
        put_circle_fence(&client(&sim.endpoint(), sim.key()), "yard", HOME, 500.0).await;
        // Listing the fences asks every range: more than 5 RU, so a caller soon owes.
        let mut listed = 0;
        let body = loop {
            let (status, body) = get_as(&base, "/api/geofences", STORM).await;
            if status == 429 {
                break body;
            }
            assert_eq!(status, 200, "{body}");
            listed += 1;
            assert!(listed < 100, "geofence reads were never refused");
        };
        assert_eq!(body["error"], "over_budget", "{body}");
        assert_eq!(get_as(&base, "/api/geofences/yard", STORM).await.0, 429);
        // A stream that starts with the snapshot is charged its query (60 drones on 4
        // ranges, more than 5 RU): the caller owes after it.
        assert_eq!(get_as(&base, "/api/drones/stream", CALM).await.0, 200);
        let (status, body) = get_as(&base, "/api/geofences/yard", CALM).await;
        assert_eq!(status, 429, "{body}");
        sim.shutdown().await;
    })
    .await
    .expect("the test finished within its time limit");
}

/// A near query by an anonymous caller whose request came through a proxy for `client`.
async fn near_forwarded(base: &str, client: &str) -> u16 {
    let url = format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=3000",
        HOME.1, HOME.0
    );
    let request = reqwest::Client::new()
        .get(url)
        .header("X-Forwarded-For", format!("{client}, 127.0.0.1"));
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_callers_are_budgeted_by_address_forwarded_only_by_a_trusted_proxy() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let budget = RuBudget::PerSec(5.0);
        // Behind a trusted proxy (this host): each forwarded client has a bucket of its own.
        let (sim, base) = fleet(ApiOptions {
            ru_per_sec_per_identity: budget,
            trusted_proxies: vec!["127.0.0.1/32".parse().unwrap()],
            ..ApiOptions::default()
        })
        .await;
        let mut served = 0;
        while near_forwarded(&base, "203.0.113.1").await == 200 {
            served += 1;
            assert!(served < 100, "the budget never ran out");
        }
        assert_eq!(near_forwarded(&base, "203.0.113.1").await, 429);
        assert_eq!(near_forwarded(&base, "203.0.113.2").await, 200);
        sim.shutdown().await;

        // No proxy trusted: the header is the client's word, and all share this host's bucket.
        let (sim, base) = fleet(ApiOptions {
            ru_per_sec_per_identity: budget,
            ..ApiOptions::default()
        })
        .await;
        let mut served = 0;
        while near_forwarded(&base, "203.0.113.1").await == 200 {
            served += 1;
            assert!(served < 100, "the budget never ran out");
        }
        assert_eq!(near_forwarded(&base, "203.0.113.2").await, 429);
        sim.shutdown().await;
    })
    .await
    .expect("the test finished within its time limit");
}

//! A short, small demo end to end: real agents, the embedded broker, the real writer and
//! the local endpoint; the report's figures and the spatial query are checked.

use std::time::Duration;

use fleet::demo::{self, DemoConfig, Output, Scenario};
use tokio_util::sync::CancellationToken;

fn small(scenario: Scenario) -> DemoConfig {
    DemoConfig {
        scenario,
        drones: 40,
        duration: Duration::from_secs(3),
        speedup: 10.0,
        output: Output::Quiet,
        tick: Duration::from_millis(500),
        api_addr: "127.0.0.1:0".parse().unwrap(),
        ..DemoConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_demo_writes_every_position_and_answers_the_spatial_query() {
    let report = demo::run(small(Scenario::Bulk), CancellationToken::new())
        .await
        .unwrap();
    assert!(report.guard_refusal.is_none());
    // 40 drones every 0.5 s for 3 s: about 240 positions.
    assert!(report.published >= 100, "published {}", report.published);
    // A position can reach the writer before its PUBACK reaches the stopping drone.
    assert!(
        report.received >= report.published,
        "received {} < published {}",
        report.received,
        report.published
    );
    assert_eq!(
        report.written + report.dropped.values().sum::<u64>(),
        report.received
    );
    assert!(report.written > 0);
    assert_eq!(report.dropped.get("stale"), None, "{:?}", report.dropped);
    assert_eq!(report.endpoint_throttled, 0);
    assert!(!report.timeline.is_empty());
    // Every partition got documents (40 keys over 4 ranges), one per drone in total.
    assert_eq!(report.partitions_detail.len(), 4);
    let documents: usize = report.partitions_detail.iter().map(|p| p.documents).sum();
    assert_eq!(documents, 40);

    let query = report.query.expect("the spatial query ran");
    // The expected set comes from the positions the fleet published, by haversine
    // distance; Cosmos answers from the documents the writer wrote.
    assert!(query.expected_from_published > 0, "no drone near the point");
    assert_eq!(query.drones.len(), query.expected_from_published);
    assert!(
        query.missing.is_empty() && query.unexpected.is_empty(),
        "{query:?}"
    );
    assert!(query.drones.iter().all(|(_, d)| *d < query.radius_m));
    assert!(
        query.drones.windows(2).all(|w| w[0].1 <= w[1].1),
        "nearest first"
    );
    // Through the read API, a fan-out: one call per range at least.
    assert!(
        query
            .request
            .starts_with(report.api_url.as_deref().unwrap()),
        "{query:?}"
    );
    assert!(query.request.contains("/api/drones/near?"), "{query:?}");
    assert!(query.calls >= 4);
    assert!(query.request_charge > 0.0);
}

#[tokio::test]
async fn hot_partition_demo_is_refused_by_the_writer_guard() {
    let report = demo::run(small(Scenario::HotPartition), CancellationToken::new())
        .await
        .unwrap();
    let refusal = report.guard_refusal.clone().expect("the guard refused");
    assert!(refusal.contains("/droneId"), "{refusal}");
    assert_eq!(report.written, 0);
    assert!(report.render().contains("refused to start"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_hot_partition_demo_shows_one_hot_range_with_429s() {
    // 300 RU/s per range against about 80 positions/s of 40 drones, all on one range.
    let config = DemoConfig {
        force: true,
        ru_per_sec: 1_200.0,
        ..small(Scenario::HotPartition)
    };
    let report = demo::run(config, CancellationToken::new()).await.unwrap();
    assert!(report.guard_refusal.is_none(), "{:?}", report.guard_refusal);
    assert_eq!(report.scenario, "hot-partition --force");
    assert!(report.written > 0);
    assert_eq!(report.partitions_detail.len(), 4);
    let (hot, idle): (Vec<_>, Vec<_>) = report
        .partitions_detail
        .iter()
        .partition(|p| p.documents > 0);
    assert_eq!(hot.len(), 1, "one range holds the documents: {hot:?}");
    let hot = hot[0];
    assert_eq!(hot.documents, 40, "every drone's document in it: {hot:?}");
    assert!(hot.throttled > 0, "the hot range answered 429s: {hot:?}");
    assert_eq!(report.endpoint_throttled, hot.throttled);
    for p in &idle {
        assert_eq!((p.throttled, p.peak_ru_per_sec), (0, 0.0), "idle: {p:?}");
    }
    let line = report.busiest_range_line().expect("several ranges");
    assert!(
        line.starts_with(&format!("busiest range {}:", hot.range)),
        "{line}"
    );
    assert!(report.render().contains(&line));
}

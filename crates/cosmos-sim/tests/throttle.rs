//! Request units and throttling over HTTP: a hot key, or documents without the key property
//! (the undefined key), are held to their partition's share while the other partitions stay
//! idle; uniform keys use the provisioned RU/s; a bulk batch that outruns its budget answers
//! 207 with per-operation 429s.

mod common;

use common::{Op, Rest, batch_body, bulk_headers, start};
use cosmos_sim::{CosmosSim, PartitionStats, Stats};
use cosmos_wire::batch::{OperationResult, OperationType, partition_key_json};
use cosmos_wire::epk::{boundary_to_u128, epk_u128_of_str, epk_u128_of_undefined};
use cosmos_wire::headers as h;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use test_harness::eventually;

/// The most a statistic is waited for.
const LIMIT: Duration = Duration::from_secs(60);

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `workers` concurrent writers that each pick keys with `key(worker, n)` (`None`: the
/// document has no key property) and upsert until stopped. Throttled answers are checked
/// and retried at once, so the load never pauses between warming up and measuring.
struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(rest: Arc<Rest>, workers: usize, key: fn(usize, usize) -> Option<String>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..workers)
            .map(|w| {
                let rest = rest.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut n = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let device = key(w, n);
                        n += 1;
                        let mut doc = json!({"id": format!("{w}-{n}"), "pad": "x".repeat(200)});
                        if let Some(device) = device {
                            doc["deviceId"] = json!(device);
                        }
                        let r = rest.upsert("db", "c", &doc).await;
                        match r.status.as_u16() {
                            201 | 200 => {}
                            429 => {
                                assert_eq!(r.header(h::SUBSTATUS), Some("3200"));
                                let wait: u64 =
                                    r.header(h::RETRY_AFTER_MS).unwrap().parse().unwrap();
                                assert!((1..=1000).contains(&wait), "{wait}");
                                assert_eq!(r.charge(), 0.0);
                            }
                            other => panic!("unexpected {other}: {}", r.body),
                        }
                    }
                })
            })
            .collect();
        Load { stop, tasks }
    }

    /// The RU the container served in each of the `seconds` whole seconds after the second
    /// `after`, from the endpoint's heat map: waits until a later second has begun, so that
    /// none of them is still being served.
    async fn served_per_second(&self, sim: &CosmosSim, after: u64, seconds: u64) -> Vec<f64> {
        let last = after + seconds;
        let stats = eventually(
            "a later second to begin",
            LIMIT,
            async || sim.stats(),
            |stats| latest_second(stats).is_some_and(|s| s > last),
        )
        .await;
        let parts = &stats.container("db", "c").unwrap().partitions;
        (after + 1..=last)
            .map(|second| {
                parts
                    .iter()
                    .flat_map(|p| &p.ru_per_second)
                    .filter(|(s, _)| *s == second)
                    .map(|(_, ru)| ru)
                    .sum()
            })
            .collect()
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
    }
}

/// Writes every document under one logical partition (`key` gives the same answer for all)
/// to a container of 4 ranges sharing 1,000 RU/s, and checks that its partition is held to its
/// share with 429s while the other three stay idle. Returns the hot partition's stats.
async fn one_hot_partition(key: fn(usize, usize) -> Option<String>) -> PartitionStats {
    let (sim, rest) = start(4, 1_000.0).await;
    let rest = Arc::new(rest);
    // Spend the hot partition's initial full bucket first, then measure the steady rate over
    // the whole seconds after the one where it first throttled.
    let load = Load::start(rest.clone(), 8, key);
    let before = eventually(
        "a throttled operation",
        LIMIT,
        async || sim.stats(),
        |stats| stats.throttled_operations > 0,
    )
    .await;
    let warm = latest_second(&before).expect("the partition served before it throttled");
    let served = load.served_per_second(&sim, warm, 2).await;
    load.stop().await;
    let rate = served.iter().sum::<f64>() / served.len() as f64;
    let throttled = sim.stats().throttled_operations - before.throttled_operations;
    let share = 1_000.0 / 4.0;
    assert!(throttled > 0, "the hot partition must throttle");
    assert!(
        rate > share * 0.85 && rate < share * 1.1,
        "hot partition served {served:?} RU in its whole seconds, share {share}"
    );
    let stats = sim.stats();
    let parts = &stats.container("db", "c").unwrap().partitions;
    let hot: Vec<_> = parts.iter().filter(|p| p.ru_total > 0.0).collect();
    assert_eq!(
        hot.len(),
        1,
        "only the hot key's partition did any work: {parts:?}"
    );
    assert!(parts.iter().all(|p| p.id == hot[0].id || p.documents == 0));
    assert!(hot[0].throttled > 0);
    assert_eq!(hot[0].ru_budget_per_sec, share);
    assert!(stats.throttled_operations > before.throttled_operations);
    assert!(
        !hot[0].ru_per_second.is_empty(),
        "the heat map has a row for it"
    );
    hot[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_key_is_throttled_at_its_partition_share_while_others_idle() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let hot = one_hot_partition(|_, _| Some("hot-drone".into())).await;
        assert!(contains(&hot, epk_u128_of_str("hot-drone")));
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_without_the_key_share_the_undefined_partition_and_its_budget() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let hot = one_hot_partition(|_, _| None).await;
        assert!(
            contains(&hot, epk_u128_of_undefined()),
            "the undefined key's range took them: {hot:?}"
        );
        assert!(hot.documents > 10, "{hot:?}");
    })
    .await
    .expect("the test finished within its time limit");
}

/// The latest second of the heat map of the test container (`None` before its first charge).
fn latest_second(stats: &Stats) -> Option<u64> {
    let parts = &stats.container("db", "c").unwrap().partitions;
    parts
        .iter()
        .filter_map(|p| p.ru_per_second.last())
        .map(|(second, _)| *second)
        .max()
}

fn contains(p: &PartitionStats, epk: u128) -> bool {
    (boundary_to_u128(&p.min_inclusive).unwrap()..boundary_to_u128(&p.max_exclusive).unwrap())
        .contains(&epk)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniform_keys_reach_the_provisioned_throughput() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // Low enough that 16 writers exceed it on a busy debug build, so the measure is the
        // endpoint's budget and not the client's speed.
        let provisioned = 400.0;
        let (sim, rest) = start(4, provisioned).await;
        let rest = Arc::new(rest);
        let key = |w: usize, n: usize| Some(format!("drone-{}", (w * 7919 + n * 104_729) % 1000));
        // Spend the initial full buckets: load until every partition has throttled, then measure
        // over the whole seconds after that.
        let load = Load::start(rest.clone(), 16, key);
        let all_throttled = |stats: &Stats| {
            let container = stats.container("db", "c").unwrap();
            container.partitions.iter().all(|p| p.throttled > 0)
        };
        let before = eventually(
            "every partition throttled",
            LIMIT,
            async || sim.stats(),
            all_throttled,
        )
        .await;
        let warm = latest_second(&before).expect("the partitions served before they throttled");
        let served = load.served_per_second(&sim, warm, 3).await;
        load.stop().await;
        let rate = served.iter().sum::<f64>() / served.len() as f64;
        let throttled = sim.stats().throttled_operations - before.throttled_operations;
        assert!(
            throttled > 0,
            "the load must exceed the budget to measure it"
        );
        assert!(
            rate >= 0.95 * provisioned,
            "served {served:?} RU in its whole seconds, {provisioned} RU/s provisioned"
        );
        assert!(
            rate <= 1.05 * provisioned,
            "served {served:?} RU in its whole seconds, more than the {provisioned} RU/s provisioned"
        );
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn bulk_batch_over_budget_answers_207_with_per_operation_429() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, rest) = start(1, 100.0).await;
        let docs: Vec<(String, String)> = (0..50)
            .map(|i| {
                let d = format!("drone-{i}");
                (
                    partition_key_json(&d),
                    json!({"id": d, "deviceId": d}).to_string(),
                )
            })
            .collect();
        let ops: Vec<Op<'_>> = docs
            .iter()
            .map(|(pk, doc)| (OperationType::Create, pk.as_str(), None, Some(doc.as_str())))
            .collect();
        let r = rest.post_docs(&bulk_headers("0"), batch_body(&ops)).await;
        assert_eq!(r.status, 207);
        let results = serde_json::from_str::<Vec<OperationResult>>(&r.body.to_string()).unwrap();
        let ok = results.iter().take_while(|o| o.status_code == 201).count();
        // 100 RU of budget, about 5.2 RU per small insert.
        assert!((15..=20).contains(&ok), "{ok} succeeded");
        for o in &results[ok..] {
            assert_eq!((o.status_code, o.sub_status_code), (429, 3200));
            assert!(o.retry_after_milliseconds.unwrap() > 0);
            assert_eq!(o.request_charge, 0.0);
        }
        let charged: f64 = results.iter().map(|o| o.request_charge).sum();
        assert!((r.charge() - charged).abs() < 0.05);
        assert!(charged <= 100.0 + 6.0);
    })
    .await
    .expect("the test finished within its time limit");
}

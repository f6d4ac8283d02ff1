//! The bulk writer against the local endpoint (`cosmos-sim`, in process): under
//! throttling, through a split and injected 503s and timeouts, retries exhausted, a
//! malformed body, and a full writer holding its caller back.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use cosmos::{BulkConfig, ContainerClient, FinalError};
use cosmos_sim::CosmosSim;
use test_harness::eventually;

/// Feeds `total` upserts with uniform keys from one task while the test reads outcomes;
/// calls `each` with the number of outcomes read after each one.
async fn run_bulk(
    c: &ContainerClient,
    config: BulkConfig,
    total: u64,
    mut each: impl FnMut(u64),
) -> cosmos::BulkStats {
    let (writer, mut outcomes) = c.bulk_writer::<u64>(config);
    let feeder = {
        let writer = writer.clone();
        tokio::spawn(async move {
            for i in 0..total {
                writer
                    .submit(upsert(
                        format!("drone-{}", i % 5_000),
                        format!("pos-{i}"),
                        i,
                    ))
                    .await
                    .unwrap();
            }
        })
    };
    let mut seen = HashSet::new();
    while (seen.len() as u64) < total {
        let outcome = outcomes
            .next()
            .await
            .expect("an outcome for every operation");
        assert!(outcome.is_success(), "{outcome:?}");
        assert!(
            seen.insert(outcome.context),
            "two outcomes for {}",
            outcome.context
        );
        each(seen.len() as u64);
    }
    feeder.await.unwrap();
    // Closing waits for every batch to be accounted for.
    let handle = writer.clone();
    writer.close().await;
    let stats = handle.stats();
    assert!(
        outcomes.next().await.is_none(),
        "no outcome beyond one per operation"
    );
    stats
}

/// RU charged so far in the test container.
fn ru_used(sim: &CosmosSim) -> f64 {
    let stats = sim.stats();
    let container = stats.container(DB, COLL).expect("container exists");
    container.partitions.iter().map(|p| p.ru_total).sum()
}

/// The test container's RU per second, all partitions together, from the endpoint's heat map.
fn ru_per_second(sim: &CosmosSim) -> BTreeMap<u64, f64> {
    let stats = sim.stats();
    let container = stats.container(DB, COLL).expect("container exists");
    let mut seconds = BTreeMap::new();
    for (second, ru) in container.partitions.iter().flat_map(|p| &p.ru_per_second) {
        *seconds.entry(*second).or_default() += ru;
    }
    seconds
}

/// The RU of each whole second of `seconds` after the second `after`: the last second is left
/// out (it may not be over) and a second without a row served nothing.
fn whole_seconds_after(seconds: &BTreeMap<u64, f64>, after: u64) -> Vec<f64> {
    let last = seconds.keys().next_back().copied().unwrap_or(after);
    (after + 1..last)
        .map(|second| seconds.get(&second).copied().unwrap_or(0.0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_bulk_writes_everything_and_uses_the_budget() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const TOTAL: u64 = 100_000;
        let sim = CosmosSim::unthrottled()
            .await
            .unwrap();
        let c = setup(&sim).await;
        // The first documents measure the offered rate (it varies a lot with the build and the
        // machine's load) over the first whole second of the endpoint's heat map, and the RU a
        // document costs. The budget is then 45% of the offered rate, so that the rest is
        // certainly throttled, and at most an eighth of what the documents not yet written
        // cost, so that on a fast machine the rest still takes about 8 s; the run is judged on the
        // whole seconds after the one the budget changed in. The probe watches the heat map
        // beside the writer, not between outcomes: on a busy machine the test reads outcomes
        // many thousands behind the writer.
        let probe = async {
            let first_whole_second = || {
                let seconds = ru_per_second(&sim);
                let first = *seconds.keys().next()?;
                let whole = whole_seconds_after(&seconds, first);
                (!whole.is_empty()).then(|| whole.iter().sum::<f64>() / whole.len() as f64)
            };
            let offered = eventually(
                "a whole second charged",
                Duration::from_secs(120),
                async || first_whole_second(),
                Option::is_some,
            )
            .await
            .expect("a whole second");
            let written = stored(&sim);
            let per_document = ru_used(&sim) / written.max(1) as f64;
            let rest = per_document * (TOTAL as usize).saturating_sub(written) as f64;
            let ru_per_sec = (0.45 * offered).min(rest / 8.0).max(1.0).round();
            sim.set_ru_per_sec(DB, COLL, ru_per_sec).unwrap();
            // The latest second charged may have ended before the change: skip one more.
            let changed = ru_per_second(&sim).keys().next_back().copied().unwrap() + 1;
            (ru_per_sec, changed)
        };
        let (stats, (ru_per_sec, changed)) = tokio::join!(
            run_bulk(&c, BulkConfig::default(), TOTAL, |_| {}),
            probe
        );

        assert_eq!(stored(&sim), TOTAL as usize, "every document is stored");
        let sim_stats = sim.stats();
        let used = ru_used(&sim);
        let throttled = whole_seconds_after(&ru_per_second(&sim), changed);
        let utilisation = throttled.iter().sum::<f64>() / (ru_per_sec * throttled.len() as f64);
        assert!(
            sim_stats.throttled_operations > 0,
            "the budget was exceeded"
        );
        assert!(
            stats.total.throttled_operations > 0,
            "the writer saw the throttles"
        );
        assert!(stats.retries > 0, "throttled operations were retried");
        assert_eq!(stats.succeeded, TOTAL);
        assert_eq!(stats.failed, 0);
        assert_eq!(stats.ranges.len(), 4, "{stats:?}");
        assert!(
            throttled.len() >= 3,
            "only {} whole seconds under the budget of {ru_per_sec} RU/s from second {changed}: {:?}",
            throttled.len(),
            ru_per_second(&sim)
        );
        assert!(
            utilisation >= 0.9,
            "used {:.0}% of {ru_per_sec} RU/s; RU per whole second: {throttled:?}",
            utilisation * 100.0
        );
        // The writer's heat map agrees with the server's.
        assert!(
            (stats.total.request_charge - used).abs() / used < 0.05,
            "{} vs {used}",
            stats.total.request_charge
        );
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_survives_a_split_503s_and_timeouts() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const TOTAL: u64 = 30_000;
        let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
        let c = setup(&sim).await;
        let config = BulkConfig {
            request_timeout: Duration::from_secs(2),
            ..BulkConfig::default()
        };
        // 5% of requests fail: half with 503, half held past the client's timeout.
        sim.set_error_rate_503(0.025);
        sim.set_timeout_rate(0.025, Duration::from_secs(3));
        let first = c.range_map().await.unwrap().ranges()[0].id.clone();
        let stats = run_bulk(&c, config, TOTAL, |seen| {
            if seen == TOTAL / 2 {
                sim.split_range(DB, COLL, &first).unwrap();
            }
        })
        .await;

        sim.set_error_rate_503(0.0);
        sim.set_timeout_rate(0.0, Duration::ZERO);
        assert_eq!(stored(&sim), TOTAL as usize, "every document is stored");
        assert!(stats.range_refreshes >= 1, "{stats:?}");
        assert!(
            stats.total.failed_batches > 0,
            "faults were injected and retried"
        );
        assert!(
            stats.ranges.len() >= 3,
            "the split range's children were written: {stats:?}"
        );
        assert_eq!(stats.failed, 0);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn exhausted_retries_are_reported_not_dropped() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
        let c = setup(&sim).await;
        c.range_map().await.unwrap();
        sim.set_error_rate_503(1.0);
        let config = BulkConfig {
            retry: cosmos::RetryPolicy {
                max_attempts: 3,
                base_backoff: Duration::from_millis(1),
                ..cosmos::RetryPolicy::default()
            },
            ..BulkConfig::default()
        };
        let (writer, mut outcomes) = c.bulk_writer::<u64>(config);
        for i in 0..250 {
            writer
                .submit(upsert(format!("d{i}"), format!("p{i}"), i))
                .await
                .unwrap();
        }
        writer.close().await;
        let mut count = 0;
        while let Some(o) = outcomes.next().await {
            count += 1;
            assert_eq!((o.status, o.attempts), (503, 3), "{o:?}");
            assert!(
                matches!(
                    o.error,
                    Some(FinalError::RetriesExhausted { attempts: 3, .. })
                ),
                "{o:?}"
            );
        }
        assert_eq!(count, 250);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn a_malformed_body_fails_alone_and_its_batch_mates_are_written() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
        let c = setup(&sim).await;
        let (writer, mut outcomes) = c.bulk_writer::<u64>(BulkConfig::default());
        for i in 0..50 {
            let mut op = upsert(format!("d{i}"), format!("p{i}"), i);
            if i == 25 {
                op.body = Bytes::from_static(b"{\"id\":\"p25\",");
            }
            writer.submit(op).await.unwrap();
        }
        writer.close().await;
        let mut n = 0;
        while let Some(o) = outcomes.next().await {
            n += 1;
            if o.context == 25 {
                assert!(matches!(o.error, Some(FinalError::Invalid(_))), "{o:?}");
            } else {
                assert!(o.is_success(), "{o:?}");
            }
        }
        assert_eq!(n, 50);
        assert_eq!(stored(&sim), 49);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn a_full_writer_makes_its_caller_wait() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
        let c = setup(&sim).await;
        c.range_map().await.unwrap();
        // Every request is held, so nothing leaves the writer until the hold ends.
        sim.set_latency(Duration::from_secs(1));
        let config = BulkConfig {
            queue_capacity: 100,
            ..BulkConfig::default()
        };
        let (writer, mut outcomes) = c.bulk_writer::<u64>(config);
        for i in 0..100 {
            writer
                .submit(upsert(format!("d{i}"), format!("p{i}"), i))
                .await
                .unwrap();
        }
        let blocked = writer.submit(upsert("d".into(), "extra".into(), 100));
        let waited = tokio::time::timeout(Duration::from_millis(300), blocked).await;
        assert!(
            waited.is_err(),
            "the 101st submit waits while 100 are inside"
        );
        sim.set_latency(Duration::ZERO);
        // Room comes back as outcomes arrive.
        writer
            .submit(upsert("d".into(), "extra".into(), 100))
            .await
            .unwrap();
        writer.close().await;
        let mut n = 0;
        while outcomes.next().await.is_some() {
            n += 1;
        }
        assert_eq!(n, 101);
    })
    .await
    .expect("the test finished within its time limit");
}

//! The official `@azure/cosmos` SDK (pinned in tools/node) against the endpoint: container
//! creation, upsert, `executeBulkOperations` of 10,000 items over 4 ranges (the SDK hashes the
//! keys and routes by range itself), a single-partition query and a cross-partition
//! `ST_DISTANCE` query; the change feed's pull-model iterator from the beginning, from now,
//! across a split and from a continuation token.

mod common;

use cosmos_sim::CosmosSim;
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use telemetry::geo::haversine_m;
// Not the endpoint's own distance: the check must not share the code it checks.
use test_harness::geo::independent_haversine_m;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `tests/sdk/{script}` against `sim` with node; the JSON of its last line of output.
async fn run_script(script: &str, sim: &CosmosSim) -> Value {
    let node = test_harness::node_bin()
        .expect("node and tools/node packages (npm ci --prefix tools/node)");
    let script = format!("{}/tests/sdk/{script}", env!("CARGO_MANIFEST_DIR"));
    let child = tokio::process::Command::new(node)
        .arg(script)
        .arg(sim.endpoint())
        .arg(sim.key())
        .arg(test_harness::node_dir())
        .current_dir(test_harness::node_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the SDK script finishes")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "SDK script failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdk_bulk_and_queries_over_four_ranges() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder()
            .partitions(4)
            .ru_per_sec(400_000.0)
            .start()
            .await
            .unwrap();
        let result = run_script("sdk_roundtrip.mjs", &sim).await;

        assert_eq!(result["upsertStatus"], 201);
        assert_eq!(result["readId"], "single");
        assert_eq!(
            result["statuses"],
            serde_json::json!({"201": 10000}),
            "{result}"
        );
        assert_eq!(result["ranges"], 4);
        let seqs: Vec<i64> = serde_json::from_value(result["singleSeqs"].clone()).unwrap();
        assert_eq!(seqs, (0..20).map(|k| 7 + 500 * k).collect::<Vec<i64>>());

        let center = (10.05, 50.05);
        let mut expected: Vec<String> = (0..10_000)
            .filter(|i| {
                let p = (
                    10.0 + (i % 100) as f64 * 0.001,
                    50.0 + (i / 100) as f64 * 0.001,
                );
                independent_haversine_m(p, center) < 2000.0
            })
            .map(|i| format!("p-{i}"))
            .collect();
        expected.sort();
        let near: Vec<String> = serde_json::from_value(result["nearIds"].clone()).unwrap();
        assert!(!expected.is_empty() && expected.len() < 10_000);
        assert_eq!(near, expected);

        // Every range took a share of the bulk writes: the SDK's routing and ours agree.
        let stats = sim.stats();
        let parts = &stats.container("sdk", "positions").unwrap().partitions;
        assert!(parts.iter().all(|p| p.documents > 1500), "{parts:?}");
        assert_eq!(parts.iter().map(|p| p.documents).sum::<usize>(), 10_001);
        // The sim's own distance agrees with the reference.
        assert!(
            (haversine_m((0.0, 0.0), (1.0, 1.0)) - independent_haversine_m((0.0, 0.0), (1.0, 1.0)))
                .abs()
                < 1e-6
        );
    })
    .await
    .expect("the test finished within its time limit");
}

/// `(id, seq)` of each change in `seen`, sorted.
fn changes(seen: &Value) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = seen
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["seq"].as_i64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Drones `0..n` at `seq`, sorted as [`changes`] sorts.
fn drones(n: usize, seq: i64) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = (0..n).map(|i| (format!("d-{i}"), seq)).collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdk_reads_the_change_feed_from_the_beginning_now_across_a_split_and_a_token() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::unthrottled().await.unwrap();
        let result = run_script("change_feed.mjs", &sim).await;

        // Three rounds written before the first read: each drone once, at its latest version,
        // every page in change order.
        assert_eq!(changes(&result["first"]["seen"]), drones(50, 2), "{result}");
        assert_eq!(result["first"]["ordered"], true);
        // From now: nothing before round 3, then exactly round 3; the beginning feed the same.
        assert_eq!(changes(&result["nowBefore"]), drones(0, 0));
        assert_eq!(changes(&result["nowAfter"]), drones(10, 3));
        assert_eq!(changes(&result["second"]), drones(10, 3));
        // Across the split of range 0 (5 ranges then): every drone once more, at round 4.
        assert_eq!(result["splitStatus"], 200);
        assert_eq!(result["ranges"], 5);
        assert_eq!(changes(&result["afterSplit"]["seen"]), drones(50, 4));
        assert_eq!(result["afterSplit"]["ordered"], true);
        // Resumed from the token: only what came after it.
        assert_eq!(changes(&result["fromToken"]), drones(5, 5));
        // The feed's last word on each drone is what a query of the documents answers.
        let mut latest = drones(50, 4);
        for (id, seq) in latest.iter_mut() {
            if id.trim_start_matches("d-").parse::<usize>().unwrap() < 5 {
                *seq = 5;
            }
        }
        latest.sort();
        assert_eq!(changes(&result["stored"]), latest);
    })
    .await
    .expect("the test finished within its time limit");
}

//! The official `@azure/cosmos` SDK (pinned in tools/node) against the endpoint: container
//! creation, upsert, `executeBulkOperations` of 10,000 items over 4 ranges (the SDK hashes the
//! keys and routes by range itself), a single-partition query and a cross-partition
//! `ST_DISTANCE` query.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdk_bulk_and_queries_over_four_ranges() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let node = test_harness::node_bin()
            .expect("node and tools/node packages (npm ci --prefix tools/node)");
        let sim = CosmosSim::builder()
            .partitions(4)
            .ru_per_sec(400_000.0)
            .start()
            .await
            .unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/sdk_roundtrip.mjs");
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
        let result: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));

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

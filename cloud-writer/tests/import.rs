//! `cloud-writer import FILE.jsonl` against the local endpoint: wire messages and
//! documents, old positions kept (a backfill), newest wins, a report of counts.

mod common;

use std::io::Write;
use std::process::Command;

use chrono::{TimeDelta, Utc};
use common::*;
use cosmos_sim::CosmosSim;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_backfills_messages_and_documents_and_reports_counts() {
    let sim = CosmosSim::builder()
        .ru_per_sec(f64::INFINITY)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backfill.jsonl");
    let mut file = std::fs::File::create(&path).unwrap();
    // A day old: a live writer would drop these as stale; an import keeps them.
    let base = Utc::now() - TimeDelta::days(1);
    for d in 0..100 {
        for seq in (1..=5u64).rev() {
            let ts = base + TimeDelta::seconds(seq as i64 * 5);
            file.write_all(&wire(&device(d), seq, ts, 1.0 + seq as f64, 2.0))
                .unwrap();
            file.write_all(b"\n").unwrap();
        }
    }
    // A document as exported from a container, newer than the messages of drone 0.
    let doc = format!(
        r#"{{"id":"drone-00000","deviceId":"drone-00000","kind":"latest","schemaVersion":1,"seq":9,"deviceTime":"{}","deviceTimeMs":0,"location":{{"type":"Point","coordinates":[3.5,4.5]}}}}"#,
        (base + TimeDelta::minutes(5)).format("%Y-%m-%dT%H:%M:%S%.3fZ")
    );
    writeln!(file, "{doc}").unwrap();
    writeln!(file, "not json at all").unwrap();
    writeln!(file).unwrap();
    drop(file);

    let out = Command::new(env!("CARGO_BIN_EXE_cloud-writer"))
        .env_clear()
        .env("COSMOS_ENDPOINT", sim.endpoint())
        .env("COSMOS_KEY", KEY)
        .env("COSMOS_CONTAINER", "imported")
        .env("COSMOS_CREATE_IF_MISSING", "true")
        .arg("import")
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("lines read:          502"), "{stdout}");
    let count = |label: &str| -> u64 {
        stdout
            .lines()
            .find(|l| l.starts_with(label))
            .and_then(|l| l.split_whitespace().last()?.parse().ok())
            .unwrap_or(0)
    };
    // Every valid line is written or superseded; drone 0's document is either coalesced
    // with its messages or written after them.
    let written = count("documents written:");
    assert!((100..=101).contains(&written), "{stdout}");
    assert_eq!(written + count("superseded:"), 501, "{stdout}");
    assert!(stdout.contains("invalid:             1"), "{stdout}");

    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "imported")).await;
    assert_eq!(docs.len(), 100);
    assert_eq!(docs["drone-00000"]["seq"], 9);
    assert_eq!(docs["drone-00000"]["location"]["coordinates"][1], 4.5);
    assert_eq!(docs["drone-00001"]["seq"], 5);
}

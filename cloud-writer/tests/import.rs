//! `cloud-writer import FILE.jsonl` against the local endpoint: wire messages and
//! documents, old positions kept (a backfill), newest wins, a report of counts; the exit
//! status is non-zero when any line was not written, and the report says which and why.

mod common;

use std::io::Write;
use std::process::{Command, Output};

use chrono::{TimeDelta, Utc};
use common::segments::segments_by_sdk;
use common::*;
use cosmos_sim::CosmosSim;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_backfills_messages_and_documents_and_reports_counts() {
    let sim = unthrottled_sim().await;
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

    let out = import(&sim, "imported", &path, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The line that is not JSON was not written: the import says so and fails.
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("1 lines (or history documents) were not written"),
        "{stderr}"
    );
    assert!(stdout.contains("lines read:          502"), "{stdout}");
    let count = |label: &str| count(&stdout, label);
    // Every valid line is written or superseded; drone 0's document is either coalesced
    // with its messages or written after them.
    let written = count("documents written:");
    assert!((100..=101).contains(&written), "{stdout}");
    assert_eq!(written + count("superseded:"), 501, "{stdout}");
    assert_eq!(count("not written:"), 1, "{stdout}");
    assert!(
        stdout.contains("  invalid:           1 (not a valid position"),
        "{stdout}"
    );

    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "imported")).await;
    assert_eq!(docs.len(), 100);
    assert_eq!(docs["drone-00000"]["seq"], 9);
    assert_eq!(docs["drone-00000"]["location"]["coordinates"][1], 4.5);
    assert_eq!(docs["drone-00001"]["seq"], 5);
}

fn import(sim: &CosmosSim, container: &str, path: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cloud-writer"))
        .env_clear()
        .env("COSMOS_ENDPOINT", sim.endpoint())
        .env("COSMOS_KEY", KEY)
        .env("COSMOS_CONTAINER", container)
        .env("COSMOS_CREATE_IF_MISSING", "true")
        .arg("import")
        .arg(path)
        .args(args)
        .output()
        .unwrap()
}

/// The number after `label` on the report line that starts with it (indentation aside).
fn count(stdout: &str, label: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Every line written (or superseded): exit 0. Lines older than --stale-after: exit 1, and
/// the report names them with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_exits_non_zero_and_says_why_when_lines_were_not_written() {
    let sim = unthrottled_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backfill.jsonl");
    let mut file = std::fs::File::create(&path).unwrap();
    let base = Utc::now() - TimeDelta::hours(2);
    for d in 0..20 {
        for seq in 1..=3u64 {
            let ts = base + TimeDelta::seconds(seq as i64 * 5);
            file.write_all(&wire(&device(d), seq, ts, 1.0, 2.0))
                .unwrap();
            file.write_all(b"\n").unwrap();
        }
    }
    drop(file);

    let clean = import(&sim, "clean", &path, &[]);
    let stdout = String::from_utf8_lossy(&clean.stdout);
    assert!(clean.status.success(), "{stdout}");
    let written = count(&stdout, "documents written:");
    assert_eq!(written + count(&stdout, "superseded:"), 60, "{stdout}");
    assert!(!stdout.contains("not written"), "{stdout}");

    let stale = import(&sim, "stale", &path, &["--stale-after", "60m"]);
    let stdout = String::from_utf8_lossy(&stale.stdout);
    assert_eq!(stale.status.code(), Some(1), "{stdout}");
    assert_eq!(count(&stdout, "not written:"), 60, "{stdout}");
    assert!(
        stdout.contains("  stale:             60 (older than --stale-after)"),
        "{stdout}"
    );
    assert!(
        String::from_utf8_lossy(&stale.stderr)
            .contains("60 lines (or history documents) were not written"),
    );
}

async fn unthrottled_sim() -> CosmosSim {
    CosmosSim::unthrottled().await.unwrap()
}

/// 20 drones x 120 positions 5 s apart imported without and with history: track segments
/// add at most 1.0 RU per position (one document per position added 4.96) and store at
/// most a fifth of the bytes of a document per position; read back with `@azure/cosmos`,
/// every position is in one segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_in_segments_costs_under_one_ru_per_position() {
    const DRONES: usize = 20;
    const POSITIONS: u64 = 120;
    let sim = unthrottled_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tracks.jsonl");
    let mut file = std::fs::File::create(&path).unwrap();
    let base = Utc::now() - TimeDelta::days(1);
    for seq in 1..=POSITIONS {
        for d in 0..DRONES {
            let ts = base + TimeDelta::seconds(seq as i64 * 5);
            file.write_all(&wire(&device(d), seq, ts, 1.0 + seq as f64 * 1e-4, 2.0))
                .unwrap();
            file.write_all(b"\n").unwrap();
        }
    }
    drop(file);
    let positions = (DRONES as u64 * POSITIONS) as f64;

    let out = import(&sim, "latest-only", &path, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cloud-writer"))
        .env_clear()
        .env("COSMOS_ENDPOINT", sim.endpoint())
        .env("COSMOS_KEY", KEY)
        .env("COSMOS_CONTAINER", "with-history")
        .env("COSMOS_CREATE_IF_MISSING", "true")
        .env("HISTORY", "true")
        .env("HISTORY_TTL", "7d")
        .arg("import")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let added = (charged(&sim, "with-history") - charged(&sim, "latest-only")) / positions;

    // Read back with the official SDK, not with the writer's own decoder.
    let segments = segments_by_sdk(&sim, KEY, "with-history").await;
    let mut kept = std::collections::BTreeSet::new();
    let mut bytes = 0;
    for segment in &segments {
        bytes += segment.bytes;
        for &(seq, _) in &segment.points {
            assert!(kept.insert((segment.device_id.clone(), seq)));
        }
    }
    assert_eq!(kept.len() as f64, positions);
    let per_position = bytes as f64 / positions;
    // One document per position, as stored (system properties included).
    let pos = telemetry::wire::decode(&wire(&device(0), 7, base, 1.0, 2.0)).unwrap();
    let mut one = telemetry::DocumentLayout::default().history(&pos, None, Some(604_800));
    for (name, value) in [
        ("_rid", "AAAAAAAAAAAAAAAAAAAAAA=="),
        (
            "_self",
            "dbs/AAAAAA==/colls/AAAAAAAAAAA=/docs/AAAAAAAAAAAAAAAAAAAAAA==/",
        ),
        ("_etag", "\"00000000-0000-0000-0000-000000000000\""),
        ("_attachments", "attachments/"),
    ] {
        one[name] = value.into();
    }
    one["_ts"] = 1_795_338_900.into();
    let one_per_position = one.to_string().len() as f64;
    println!(
        "history: {added:.3} RU and {per_position:.1} bytes per position ({} segments; one document per position: {one_per_position} bytes)",
        segments.len()
    );
    assert!(added <= 1.0, "{added} RU per position");
    // `check` says which history format each container holds.
    for (name, says) in [
        ("with-history", "history: track segments"),
        ("latest-only", "history: none"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cloud-writer"))
            .env_clear()
            .env("COSMOS_ENDPOINT", sim.endpoint())
            .env("COSMOS_KEY", KEY)
            .env("COSMOS_CONTAINER", name)
            .arg("check")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(says),
            "{name}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        per_position <= one_per_position / 5.0,
        "{per_position} bytes per position"
    );
}

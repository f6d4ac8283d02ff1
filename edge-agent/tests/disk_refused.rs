//! A disk that refuses writes: the agent binary runs under a file-size limit (`ulimit -f`,
//! SIGXFSZ ignored), so every write past 2 KiB fails with EFBIG as on a full disk.
//! The segment stays whole (later records are not read as damaged) and positions go on
//! being published from memory, counted.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use common::{Subscriber, TIMEOUT};
use edge_agent::BufferConfig;
use edge_agent::DiskBuffer;
use test_harness::Mosquitto;

/// The file-size limit in 512-byte blocks: 2 KiB, a handful of records.
const LIMIT_BLOCKS: u32 = 4;

#[tokio::test]
async fn a_disk_that_refuses_writes_keeps_the_segment_whole_and_positions_flowing() {
    let broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-disk").await;
    let dir = tempfile::tempdir().unwrap();
    let buffer_dir = dir.path().join("buffer");
    let status_file = dir.path().join("status.json");
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "position_source = \"sim\"\nreport_interval = 0.1\nbuffer_dir = \"{}\"\nstatus_file = \"{}\"\n",
            buffer_dir.display(),
            status_file.display()
        ),
    )
    .unwrap();
    let script = format!("trap '' XFSZ; ulimit -f {LIMIT_BLOCKS}; exec \"$0\" run --config \"$1\"");
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_edge-agent")])
        .arg(&config)
        .env("MQTT_URL", broker.url())
        .env("DEVICE_ID", "drone-disk")
        .env_remove("IOTHUB_DEVICE_CONNECTION_STRING")
        .env_remove("EDGE_AGENT_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    // Far more positions than 2 KiB of records hold.
    let received = subscriber.until(|all| all.len() >= 25).await;
    let pid = child.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let exit = tokio::time::timeout(TIMEOUT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");

    // Every position made arrived, those the disk refused too, without a gap.
    let seqs: BTreeSet<u64> = received.iter().map(|r| r.position.seq).collect();
    let newest = *seqs.last().unwrap();
    assert_eq!(seqs, (1..=newest).collect(), "a gap in {seqs:?}");
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&status_file).unwrap()).unwrap();
    let count = |field: &str| status[field].as_u64().unwrap();
    assert!(count("unbuffered") >= 10, "refusals counted: {status}");
    assert!(
        status["last_error"].as_str().unwrap().contains("seg-"),
        "{status}"
    );
    // Each message was acknowledged, is still buffered, or is counted as lost (sent from
    // memory but not acknowledged when the agent stopped).
    assert_eq!(
        count("acked")
            + count("buffer_depth")
            + status["dropped"]["write_failed"].as_u64().unwrap(),
        count("generated"),
        "{status}"
    );

    // The segment holds whole records only: nothing is damaged, and records appended
    // after it (the disk has room again) are read back.
    let config = BufferConfig {
        dir: buffer_dir,
        max_bytes: 1 << 20,
        fsync: true,
    };
    let mut buffer = DiskBuffer::open(&config).unwrap();
    assert_eq!(buffer.stats().corrupt, 0);
    assert!(buffer.stats().bytes <= u64::from(LIMIT_BLOCKS) * 512);
    let id = buffer.append(1_700_000_000_000, b"{}".to_vec()).unwrap().id;
    assert!(id > newest, "seq {id} not after {newest}");
    drop(buffer);
    let buffer = DiskBuffer::open(&config).unwrap();
    assert_eq!(buffer.stats().corrupt, 0);
    assert!(buffer.is_pending(id));
}

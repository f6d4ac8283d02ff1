//! `MIN_WRITE_INTERVAL`: at most one write per drone per interval, of its newest position,
//! through Mosquitto into the local endpoint. A drone's positions that arrive within the
//! interval after its write are held and superseded by the newest, which is written when
//! the interval is up; and (the writer as a process, killed while it holds positions) no
//! message of a held or superseded position was acknowledged: the broker sends every one
//! of them again to the restarted writer, and every drone ends at its newest position.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;
use test_harness::eventually;

use chrono::{DateTime, TimeDelta, Utc};
use cloud_writer::{DropReason, DurationSetting, Settings};
use common::*;
use cosmos_sim::CosmosSim;
use test_harness::Mosquitto;

const DRONES: usize = 100;

/// A writer process, killed when dropped (also when the test fails).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every drone's `seq`th position, `seq` × 5 s after `start`.
fn round(start: DateTime<Utc>, seq: u64) -> Vec<Publish> {
    (0..DRONES)
        .map(|d| Publish {
            device: device(d),
            payload: wire(
                &device(d),
                seq,
                start + TimeDelta::seconds(5 * seq as i64),
                10.0 + d as f64 / 100.0,
                20.0 + seq as f64 / 1000.0,
            ),
        })
        .collect()
}

/// Whether every drone's latest document is its `seq`th position.
fn all_at(docs: &std::collections::HashMap<String, serde_json::Value>, seq: u64) -> bool {
    docs.len() == DRONES && docs.values().all(|d| d["seq"] == seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drone_is_written_once_per_interval_with_its_newest_position() {
    let broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    // Long enough that rounds 2 and 3 always arrive within it, on any machine.
    let interval = Duration::from_secs(10);
    let writer = start_writer(Settings {
        min_write_interval: Some(DurationSetting(interval)),
        ..settings(&sim.endpoint(), &broker.url(), "spaced")
    })
    .await;
    let start = Utc::now() - TimeDelta::seconds(60);
    publish(broker.port(), "fleet-spaced", &round(start, 1)).await;
    eventually(
        "each drone's first position, written at once",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| c.written == DRONES as u64,
    )
    .await;
    let mut later = round(start, 3);
    later.extend(round(start, 2));
    publish(broker.port(), "fleet-spaced", &later).await;
    let counts = eventually(
        "rounds 2 and 3 received",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| c.received == 3 * DRONES as u64,
    )
    .await;
    assert_eq!(
        counts.written, DRONES as u64,
        "written within the interval: {counts:?}"
    );
    let cosmos = container(&sim.endpoint(), "telemetry", "spaced");
    assert!(all_at(&latest_documents(&cosmos).await, 1));

    let counts = wait_final(&writer, 3 * DRONES as u64).await;
    assert_eq!(counts.written, 2 * DRONES as u64, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::Superseded), DRONES as u64);
    assert!(all_at(&latest_documents(&cosmos).await, 3));
    writer.shutdown();
    writer.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_holding_positions_it_had_acknowledged_none_of_them() {
    let broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    let endpoint = sim.endpoint();
    let spawn = |interval: &str| {
        let (port, probes) = (free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_cloud-writer"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("COSMOS_ENDPOINT", &endpoint)
            .env("COSMOS_KEY", KEY)
            .env("COSMOS_DATABASE", "telemetry")
            .env("COSMOS_CONTAINER", "held")
            .env("COSMOS_CREATE_IF_MISSING", "true")
            .env("WRITER_SOURCE", broker.url())
            .env("MQTT_CLIENT_ID", "writer-held")
            .env("METRICS_ADDR", format!("127.0.0.1:{port}"))
            .env("PROBE_ADDR", format!("127.0.0.1:{probes}"))
            .env("MIN_WRITE_INTERVAL", interval)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        (Killed(child), port, probes)
    };
    const RECEIVED: &str = "cloud_writer_messages_received_total ";
    const WRITTEN: &str = "cloud_writer_documents_written_total{kind=\"latest\"} ";

    let ready = |port: u16| async move {
        reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
            .await
            .is_ok_and(|r| r.status() == 200)
    };
    let (first, port, probes) = spawn("60s");
    // Ready once its subscription is acknowledged: what is published from then on is its.
    eventually(
        "the writer subscribed",
        Duration::from_secs(30),
        || ready(probes),
        |r| *r,
    )
    .await;
    let start = Utc::now() - TimeDelta::seconds(60);
    publish(broker.port(), "fleet-held", &round(start, 1)).await;
    eventually(
        "each drone's first position written",
        Duration::from_secs(30),
        || metric(port, WRITTEN),
        |w| *w == Some(DRONES as u64),
    )
    .await;
    let mut held = Vec::new();
    for seq in [3, 5, 2, 4] {
        held.extend(round(start, seq));
    }
    publish(broker.port(), "fleet-held", &held).await;
    eventually(
        "the held positions received",
        Duration::from_secs(30),
        || metric(port, RECEIVED),
        |r| *r == Some(5 * DRONES as u64),
    )
    .await;
    assert_eq!(
        metric(port, WRITTEN).await,
        Some(DRONES as u64),
        "held, not written"
    );
    drop(first);

    // Restarted without the interval: every held and superseded message comes again.
    let (_second, port, _) = spawn("0");
    let cosmos = container(&endpoint, "telemetry", "held");
    eventually(
        "every drone at its newest position",
        Duration::from_secs(60),
        || latest_documents(&cosmos),
        |docs| all_at(docs, 5),
    )
    .await;
    let again = eventually(
        "every unacknowledged message sent again",
        Duration::from_secs(30),
        || metric(port, RECEIVED),
        |r| r.is_some_and(|r| r >= 4 * DRONES as u64),
    )
    .await;
    assert_eq!(again, Some(4 * DRONES as u64));
}

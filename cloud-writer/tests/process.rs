//! The writer as a separate process: the startup guard's exit codes, SIGKILL mid-stream
//! and restart, SIGTERM.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;
use test_harness::eventually;

use chrono::Utc;
use cloud_writer::Writer;
use common::*;
use cosmos_sim::CosmosSim;
use test_harness::Mosquitto;

const BIN: &str = env!("CARGO_BIN_EXE_cloud-writer");

/// A writer process's two listeners.
#[derive(Debug, Clone, Copy)]
struct Ports {
    metrics: u16,
    probes: u16,
}

impl Ports {
    fn free() -> Self {
        Ports {
            metrics: free_port(),
            probes: free_port(),
        }
    }
}

fn command(endpoint: &str, source: &str, container: &str, ports: Ports) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("COSMOS_ENDPOINT", endpoint)
        .env("COSMOS_KEY", KEY)
        .env("COSMOS_DATABASE", "telemetry")
        .env("COSMOS_CONTAINER", container)
        .env("WRITER_SOURCE", source)
        .env("MQTT_CLIENT_ID", format!("writer-{container}"))
        .env("METRICS_ADDR", format!("127.0.0.1:{}", ports.metrics))
        .env("PROBE_ADDR", format!("127.0.0.1:{}", ports.probes))
        .env("RUST_LOG", "warn,cloud_writer=info")
        .stdin(Stdio::null());
    cmd
}

fn run_to_exit(mut cmd: Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_partition_key_path_exits_non_zero_naming_path_and_setting() {
    let sim = CosmosSim::builder().start().await.unwrap();
    sim.create_container("telemetry", "byfleet", "/fleetId")
        .unwrap();
    let out = run_to_exit(command(
        &sim.endpoint(),
        "mqtt://127.0.0.1:1",
        "byfleet",
        Ports::free(),
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("'/fleetId'"), "{stderr}");
    assert!(
        stderr.contains("COSMOS_PARTITION_KEY_PATH=/fleetId"),
        "{stderr}"
    );
    // With the setting changed as told, the guard passes.
    let mut fixed = command(
        &sim.endpoint(),
        "mqtt://127.0.0.1:1",
        "byfleet",
        Ports::free(),
    );
    fixed
        .env("COSMOS_PARTITION_KEY_PATH", "/fleetId")
        .arg("check");
    let out = run_to_exit(fixed);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The container indexes every path (Cosmos DB's default): the check says what that
    // costs, and that the read side's spatial index is missing.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("warning: the container's indexing policy indexes more than the read side needs: about 1")
            && stdout.contains("--idx @deploy/cosmos/indexing-policy.json"),
        "{stdout}"
    );
    assert!(stdout.contains("/location (spatial)"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_container_exits_non_zero_unless_told_to_create_it() {
    let sim = CosmosSim::builder().start().await.unwrap();
    let mut cmd = command(
        &sim.endpoint(),
        "mqtt://127.0.0.1:1",
        "absent",
        Ports::free(),
    );
    cmd.arg("check");
    let out = run_to_exit(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("'absent'") && stderr.contains("COSMOS_CREATE_IF_MISSING=true"),
        "{stderr}"
    );
    let mut create = command(
        &sim.endpoint(),
        "mqtt://127.0.0.1:1",
        "absent",
        Ports::free(),
    );
    create.env("COSMOS_CREATE_IF_MISSING", "true").arg("check");
    let out = run_to_exit(create);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ok: the server takes Patch in batches"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok: the indexing policy costs about 1"),
        "the container the writer creates has the project's policy: {stdout}"
    );
    // A configuration error is exit code 2 and names the variable.
    let mut bad = command(&sim.endpoint(), "http://nowhere", "absent", Ports::free());
    bad.arg("check");
    let out = run_to_exit(bad);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("WRITER_SOURCE"));
}

/// Waits until the writer's `/readyz` (on the probes' port) answers 200.
async fn wait_ready(ports: Ports, child: &mut Child) {
    let url = format!("http://127.0.0.1:{}/readyz", ports.probes);
    eventually(
        "the writer ready",
        Duration::from_secs(60),
        async || {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the writer exited early"
            );
            reqwest::get(&url).await.map(|r| r.status().as_u16()).ok()
        },
        |status| *status == Some(200),
    )
    .await;
}

const WRITTEN: &str = "cloud_writer_documents_written_total{kind=\"latest\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_and_restart_lose_nothing_and_move_nothing_back() {
    let broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    let endpoint = sim.endpoint();
    let spawn = || {
        let ports = Ports::free();
        let mut cmd = command(&endpoint, &broker.url(), "killed", ports);
        cmd.env("COSMOS_CREATE_IF_MISSING", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        (cmd.spawn().unwrap(), ports)
    };
    let (mut first, ports) = spawn();
    wait_ready(ports, &mut first).await;
    let port = ports.metrics;

    let s = scenario(2_000, 10, Utc::now());
    let messages = s.messages.clone();
    let broker_port = broker.port();
    let publisher =
        tokio::spawn(async move { publish(broker_port, "fleet-killed", &messages).await });
    eventually(
        "the first writer to write a part",
        Duration::from_secs(60),
        || metric(port, WRITTEN),
        |w| w.is_some_and(|w| w >= 500),
    )
    .await;
    first.kill().unwrap();
    first.wait().unwrap();
    let cosmos = container(&endpoint, "telemetry", "killed");
    let before = latest_documents(&cosmos).await;
    assert!(!before.is_empty());

    let (mut second, ports) = spawn();
    wait_ready(ports, &mut second).await;
    let port = ports.metrics;
    publisher.await.unwrap();
    let order = |doc: &serde_json::Value| {
        (
            doc["deviceTimeMs"].as_i64().unwrap(),
            doc["seq"].as_u64().unwrap(),
        )
    };
    let docs = eventually(
        "every drone's newest position after the restart",
        Duration::from_secs(90),
        || latest_documents(&cosmos),
        |docs| {
            docs.len() == s.expected.len()
                && s.expected.iter().all(|(d, (t, seq, _, _))| {
                    docs.get(d).is_some_and(|doc| order(doc) == (*t, *seq))
                })
        },
    )
    .await;
    assert_newest(&docs, &s.expected);
    for (device, old) in &before {
        assert!(order(&docs[device]) >= order(old), "{device} moved back");
    }
    // The restarted writer got what the killed one had not acknowledged.
    assert!(
        metric(port, "cloud_writer_messages_received_total")
            .await
            .unwrap()
            > 0
    );
    second.kill().unwrap();
    second.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_writes_acknowledges_them_and_exits_zero() {
    let broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    let ports = Ports::free();
    let port = ports.metrics;
    let mut cmd = command(&sim.endpoint(), &broker.url(), "termed", ports);
    cmd.env("COSMOS_CREATE_IF_MISSING", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    wait_ready(ports, &mut child).await;

    let s = scenario(1_000, 5, Utc::now());
    publish(broker.port(), "fleet-termed", &s.messages).await;
    eventually(
        "some writes",
        Duration::from_secs(30),
        || metric(port, WRITTEN),
        |w| w.is_some_and(|w| w > 0),
    )
    .await;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("shutting down"), "{stderr}");

    // A writer with the same session gets only what the first did not acknowledge, and
    // together they account for every message.
    let cosmos = container(&sim.endpoint(), "telemetry", "termed");
    let docs_before = latest_documents(&cosmos).await;
    let writer = Writer::start(
        settings(&sim.endpoint(), &broker.url(), "termed")
            .resolve()
            .unwrap(),
    )
    .await
    .unwrap();
    let total = s.messages.len() as u64;
    eventually(
        "the rest written",
        Duration::from_secs(60),
        || latest_documents(&cosmos),
        |docs| {
            docs.len() == s.expected.len()
                && docs.iter().all(|(d, doc)| doc["seq"] == s.expected[d].1)
        },
    )
    .await;
    let received = writer.counts().received;
    assert!(
        received < total,
        "acknowledged messages came again: {received} of {total}"
    );
    assert!(!docs_before.is_empty());
    writer.shutdown();
    writer.wait().await.unwrap();
}

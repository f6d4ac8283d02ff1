//! The agent's control plane against the local hub (`crates/hub-sim`), driven through the
//! hub's service side in-process: desired properties change the agent's intervals and are
//! acknowledged with their version, a change made while the agent is stopped is applied when
//! it starts, refused values keep the setting, `REMOTE_CONFIG=off` refuses everything, the
//! reported properties name the agent's version, and the direct methods `reportNow` and
//! `status` answer (any other 404).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Running, TIMEOUT};
use edge_agent::{AgentConfig, RemoteConfig};
use edge_agent::{Secret, Settings};
use hub_sim::{HubConfig, HubSim, MethodTimeouts};
use retry_backoff::BackoffConfig;
use serde_json::{Value, json};
use test_harness::eventually;

const DEVICE: &str = "drone-0042";

/// A method call waits for the answer at most 10 s, and the agent must be online.
fn timeouts() -> MethodTimeouts {
    MethodTimeouts {
        response: Duration::from_secs(10),
        connect: Duration::ZERO,
    }
}

async fn start_hub(dir: &Path) -> HubSim {
    HubSim::start(HubConfig::new(dir.join("hub")))
        .await
        .unwrap()
}

/// An agent of `device` on `hub` over TLS with SAS, the simulator as its source, sampling
/// every `report_interval` unless the twin says otherwise, buffering in `dir`.
fn agent_config(
    hub: &HubSim,
    connection_string: &str,
    dir: &Path,
    report_interval: &str,
) -> AgentConfig {
    let ca = dir.join("hub-ca.pem");
    std::fs::write(&ca, hub.ca_pem()).unwrap();
    let settings = Settings {
        connection_string: Some(Secret::new(connection_string)),
        iothub_port: Some(hub.mqtt_addr().port()),
        iothub_ca_file: Some(ca),
        position_source: Some("sim".into()),
        buffer_dir: Some(dir.join("buffer")),
        report_interval: Some(report_interval.parse().unwrap()),
        max_fix_age: Some("60s".parse().unwrap()),
        ..Settings::default()
    };
    let mut config = settings.resolve().unwrap();
    config.buffer.fsync = false;
    config.transport.backoff = BackoffConfig {
        base: Duration::from_millis(50),
        cap: Duration::from_millis(400),
    };
    config
}

/// Waits until `ready` holds for the device's reported properties, and returns them.
async fn reported_until(hub: &HubSim, what: &str, mut ready: impl FnMut(&Value) -> bool) -> Value {
    // The hub's twin offers no change notification in-process: polled.
    eventually(what, TIMEOUT, async || reported(hub), |r| ready(r)).await
}

/// The device's reported properties now.
fn reported(hub: &HubSim) -> Value {
    let twin = hub.twin(DEVICE).expect("the device has a twin");
    twin["properties"]["reported"].clone()
}

/// The ack of `name` if it acknowledges version `version`.
fn acked(reported: &Value, name: &str, version: u64) -> Option<Value> {
    let ack = &reported[name];
    (ack["av"] == version).then(|| ack.clone())
}

/// The positions of the device the hub holds, by `seq`, with their time.
fn positions(hub: &HubSim) -> Vec<(u64, chrono::DateTime<chrono::Utc>)> {
    let partition = hub
        .partitions()
        .get(hub.partitions().partition_of(DEVICE))
        .unwrap();
    let mut events = Vec::new();
    partition.read(0, 100_000, &mut events);
    let mut positions: Vec<_> = events
        .iter()
        .map(|event| {
            let body: Value = serde_json::from_slice(&event.message.body).unwrap();
            (
                body["seq"].as_u64().unwrap(),
                body["ts"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    positions.sort_unstable();
    positions.dedup_by_key(|p| p.0);
    positions
}

/// Waits until the hub holds a position with `seq` at least `seq`.
async fn position_from(hub: &HubSim, seq: u64) {
    let partition = hub
        .partitions()
        .get(hub.partitions().partition_of(DEVICE))
        .unwrap();
    let mut changes = partition.watch();
    tokio::time::timeout(TIMEOUT, async {
        while !positions(hub).iter().any(|(s, _)| *s >= seq) {
            changes.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no position with seq {seq} or later"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desired_interval_is_applied_at_once_and_acknowledged_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let cs = hub.add_device(DEVICE).unwrap();
    let agent = Running::start(agent_config(&hub, &cs, dir.path(), "5s"));
    // The first report names the agent's version and its settings.
    let first = reported_until(&hub, "the first report", |r| r["agent"].is_object()).await;
    assert_eq!(first["agent"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(first["settings"]["reportInterval"], 5);
    assert_eq!(first["source"]["kind"], "sim");

    let version = hub
        .update_desired(DEVICE, &json!({"reportInterval": 1}))
        .unwrap();
    let changed = tokio::time::Instant::now();
    let ack = reported_until(&hub, "the acknowledgement", |r| {
        acked(r, "reportInterval", version).is_some()
    })
    .await;
    assert!(changed.elapsed() < Duration::from_secs(5));
    assert_eq!(
        ack["reportInterval"],
        json!({"value": 1, "ac": 200, "av": version, "ad": "applied"})
    );
    // Messages now come about a second apart, not five.
    let from = agent.handle.status().next_seq;
    position_from(&hub, from + 4).await;
    let times: Vec<_> = positions(&hub)
        .into_iter()
        .filter(|(seq, _)| *seq >= from)
        .map(|(_, ts)| ts)
        .collect();
    let gaps: Vec<i64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).num_milliseconds())
        .collect();
    // About a second each; a busy machine may delay one tick, never to the old five.
    let mean = gaps.iter().sum::<i64>() / gaps.len() as i64;
    assert!(
        (500..2000).contains(&mean) && gaps.iter().all(|gap| *gap < 4500),
        "gaps {gaps:?} ms"
    );
    assert_eq!(agent.handle.status().settings.report_interval_ms, 1000);
    agent.stop().await;
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_while_the_agent_is_stopped_is_applied_when_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let cs = hub.add_device(DEVICE).unwrap();
    let config = agent_config(&hub, &cs, dir.path(), "5s");
    let agent = Running::start(config.clone());
    reported_until(&hub, "the first report", |r| r["agent"].is_object()).await;
    agent.stop().await;

    let version = hub
        .update_desired(DEVICE, &json!({"reportInterval": 2, "publishEvery": 4}))
        .unwrap();
    let agent = Running::start(config.clone());
    let ack = reported_until(&hub, "the acknowledgements", |r| {
        acked(r, "reportInterval", version).is_some() && acked(r, "publishEvery", version).is_some()
    })
    .await;
    assert_eq!(ack["reportInterval"]["ac"], 200);
    assert_eq!(ack["publishEvery"]["value"], 4);
    let status = agent
        .wait_for("the twin's settings", |s| {
            s.settings.report_interval_ms == 2000
        })
        .await;
    assert_eq!(status.settings.publish_every_ms, 4000);
    assert_eq!(status.settings.desired_version, Some(version));
    agent.stop().await;

    // Kept on disk: the next start has them before it connects.
    hub.shutdown().await;
    let agent = Running::start(config);
    let status = agent.handle.status();
    assert_eq!(status.settings.report_interval_ms, 2000, "{status:?}");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_the_agent_cannot_use_is_refused_and_the_interval_kept() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let cs = hub.add_device(DEVICE).unwrap();
    let agent = Running::start(agent_config(&hub, &cs, dir.path(), "2s"));
    reported_until(&hub, "the first report", |r| r["agent"].is_object()).await;
    for bad in [json!(0), json!("1s"), json!(-1)] {
        let version = hub
            .update_desired(DEVICE, &json!({ "reportInterval": bad }))
            .unwrap();
        let reported = reported_until(&hub, "the refusal", |r| {
            acked(r, "reportInterval", version).is_some()
        })
        .await;
        let ack = &reported["reportInterval"];
        assert_eq!(ack["ac"], 400, "{ack}");
        assert_eq!(ack["value"], 2, "{ack}");
        assert!(ack["ad"].as_str().unwrap().contains("keeping 2"), "{ack}");
        assert_eq!(agent.handle.status().settings.report_interval_ms, 2000);
    }
    agent.stop().await;
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_config_off_refuses_every_change_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let cs = hub.add_device(DEVICE).unwrap();
    let mut config = agent_config(&hub, &cs, dir.path(), "2s");
    config.remote_config = RemoteConfig::Off;
    let agent = Running::start(config);
    reported_until(&hub, "the first report", |r| r["agent"].is_object()).await;
    let version = hub
        .update_desired(DEVICE, &json!({"reportInterval": 1, "publishEvery": 10}))
        .unwrap();
    let reported = reported_until(&hub, "the refusals", |r| {
        acked(r, "reportInterval", version).is_some() && acked(r, "publishEvery", version).is_some()
    })
    .await;
    for name in ["reportInterval", "publishEvery"] {
        let ack = &reported[name];
        assert_eq!(ack["ac"], 403, "{ack}");
        assert_eq!(ack["value"], 2, "{ack}");
        assert!(
            ack["ad"].as_str().unwrap().contains("REMOTE_CONFIG=off"),
            "{ack}"
        );
    }
    assert_eq!(reported["settings"]["remoteConfig"], "off");
    assert_eq!(agent.handle.status().settings.report_interval_ms, 2000);
    agent.stop().await;
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_now_publishes_at_once_and_other_methods_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let cs = hub.add_device(DEVICE).unwrap();
    // A minute between samples: only reportNow makes one soon.
    let agent = Running::start(agent_config(&hub, &cs, dir.path(), "60s"));
    reported_until(&hub, "the first report", |r| r["agent"].is_object()).await;
    let before = agent.handle.status().next_seq;

    let called = tokio::time::Instant::now();
    let answer = hub
        .invoke_method(DEVICE, "reportNow", &json!(null), timeouts())
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    let seq = answer.payload["seq"].as_u64().unwrap();
    assert!(seq >= before, "{seq} before {before}");
    position_from(&hub, seq).await;
    assert!(called.elapsed() < Duration::from_secs(30));

    let status = hub
        .invoke_method(DEVICE, "status", &json!({}), timeouts())
        .await
        .unwrap();
    assert_eq!(status.status, 200);
    assert_eq!(status.payload["device_id"], DEVICE);
    assert_eq!(status.payload["version"], env!("CARGO_PKG_VERSION"));

    let unknown = hub
        .invoke_method(DEVICE, "reboot", &json!({}), timeouts())
        .await
        .unwrap();
    assert_eq!(unknown.status, 404);
    assert!(
        unknown.payload["error"]
            .as_str()
            .unwrap()
            .contains("reboot")
    );
    agent.stop().await;
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_now_without_a_fix_is_refused_and_nothing_is_published() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let cs = hub.add_device(DEVICE).unwrap();
    // gpsd where nothing listens: the agent runs, connects, and has no fix.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gpsd = closed.local_addr().unwrap().to_string();
    drop(closed);
    let ca = dir.path().join("hub-ca.pem");
    std::fs::write(&ca, hub.ca_pem()).unwrap();
    let settings = Settings {
        connection_string: Some(Secret::new(cs)),
        iothub_port: Some(hub.mqtt_addr().port()),
        iothub_ca_file: Some(ca),
        position_source: Some("gpsd".into()),
        gpsd_address: Some(gpsd),
        buffer_dir: Some(dir.path().join("buffer")),
        ..Settings::default()
    };
    let agent = Running::start(settings.resolve().unwrap());
    reported_until(&hub, "the first report", |r| r["source"]["fix"] == false).await;
    let answer = hub
        .invoke_method(DEVICE, "reportNow", &json!({}), timeouts())
        .await
        .unwrap();
    assert_eq!(answer.status, 409, "{answer:?}");
    assert!(answer.payload["error"].as_str().unwrap().contains("no fix"));
    assert_eq!(agent.handle.status().generated, 0);
    assert!(positions(&hub).is_empty());
    agent.stop().await;
    hub.shutdown().await;
}

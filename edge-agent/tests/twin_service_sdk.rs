//! The agent's control plane driven by Microsoft's service SDK, azure-iot-hub's
//! `IoTHubRegistryManager` (the local hub's `crates/hub-sim/tests/python/service.py`, in
//! `target/venv-service` as scripts/test-all makes it), against the local hub: a desired
//! change made with `update_twin` is acknowledged as the SDK reads it back with `get_twin`,
//! and `invoke_device_method` gets `reportNow`'s seq and an unknown method's 404.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Running, TIMEOUT};
use edge_agent::{Secret, Settings};
use hub_sim::{HubConfig, HubSim};
use retry_backoff::BackoffConfig;
use serde_json::Value;

const DEVICE: &str = "drone-0042";

/// The python of the service SDK's environment.
fn python() -> PathBuf {
    let venv = std::env::var_os("EDGE_AGENT_VENV_SERVICE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-service")
        });
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/test-all makes the service SDK environment \
         (python_env service crates/hub-sim/tests/python/requirements-service.txt), \
         or set EDGE_AGENT_VENV_SERVICE",
        python.display()
    );
    python
}

/// `service.py MODE DEVICE ARGS...`: its JSON outcome.
async fn service(hub: &HubSim, ca: &Path, args: &[&str]) -> Value {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/hub-sim/tests/python/service.py");
    let output = tokio::time::timeout(
        TIMEOUT,
        tokio::process::Command::new(python())
            .arg(script)
            .args(args)
            .env("PYTHONUNBUFFERED", "1")
            .env("HUB_SIM_PORT", hub.ws_addr().port().to_string())
            .env("REQUESTS_CA_BUNDLE", ca)
            .env(
                "HUB_SIM_SERVICE_CONNECTION_STRING",
                hub.service_connection_string(),
            )
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the service SDK answers in time")
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("no JSON outcome\n{stdout}\n{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_sdk_changes_the_interval_and_calls_the_methods() {
    let dir = tempfile::tempdir().unwrap();
    let hub = HubSim::start(HubConfig::new(dir.path().join("hub")))
        .await
        .unwrap();
    let cs = hub.add_device(DEVICE).unwrap();
    let ca = dir.path().join("hub-ca.pem");
    std::fs::write(&ca, hub.ca_pem()).unwrap();
    let settings = Settings {
        connection_string: Some(Secret::new(cs)),
        iothub_port: Some(hub.mqtt_addr().port()),
        iothub_ca_file: Some(ca.clone()),
        position_source: Some("sim".into()),
        buffer_dir: Some(dir.path().join("buffer")),
        report_interval: Some("5s".parse().unwrap()),
        ..Settings::default()
    };
    let mut config = settings.resolve().unwrap();
    config.buffer.fsync = false;
    config.transport.backoff = BackoffConfig {
        base: Duration::from_millis(50),
        cap: Duration::from_millis(400),
    };
    let agent = Running::start(config);
    agent
        .wait_for("the connection", |s| s.connections >= 1)
        .await;

    let updated = service(&hub, &ca, &["desired", DEVICE, r#"{"reportInterval": 1}"#]).await;
    let version = updated["twin"]["properties"]["desired"]["$version"]
        .as_u64()
        .expect("the desired version");
    agent
        .wait_for("the twin's interval", |s| {
            s.settings.report_interval_ms == 1000 && s.settings.desired_version == Some(version)
        })
        .await;
    // The acknowledgement, as the SDK reads the twin.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let ack = loop {
        let read = service(&hub, &ca, &["get", DEVICE]).await;
        let ack = read["twin"]["properties"]["reported"]["reportInterval"].clone();
        if ack["av"] == version {
            break ack;
        }
        assert!(tokio::time::Instant::now() < deadline, "no ack: {read:#}");
    };
    assert_eq!(ack["ac"], 200, "{ack}");
    assert_eq!(ack["value"], 1, "{ack}");

    let called = service(&hub, &ca, &["invoke", DEVICE, "reportNow", "{}", "10", "0"]).await;
    assert_eq!(called["status"], 200, "{called}");
    assert!(called["payload"]["seq"].as_u64().is_some(), "{called}");
    let unknown = service(&hub, &ca, &["invoke", DEVICE, "shell", "{}", "10", "0"]).await;
    assert_eq!(unknown["status"], 404, "{unknown}");
    agent.stop().await;
    hub.shutdown().await;
}

//! The agent in IoT Hub mode against the local hub (`crates/hub-sim`): a device connection
//! string with SAS (MQTT over TLS, or over WebSockets) or an X.509 certificate, TLS
//! trusting the hub's CA (`IOTHUB_CA_FILE`) on the hub's port (`IOTHUB_PORT`). The hub checks the token, the client id, the username and the topic,
//! refuses what IoT Hub refuses, and routes what it accepts to its device's partition.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use hub_sim::AuthMethod;
use hub_sim::{HubConfig, HubSim};

const DEVICE: &str = "drone-0007";

/// Starts the agent binary for `device` against `hub` with `settings` besides the
/// simulator, a 100 ms interval, a buffer in `dir` and the hub's CA.
fn agent(hub: &HubSim, dir: &Path, settings: &[(&str, String)]) -> tokio::process::Child {
    let ca = dir.join("hub-ca.pem");
    std::fs::write(&ca, hub.ca_pem()).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_edge-agent"));
    for var in [
        "MQTT_URL",
        "DEVICE_ID",
        "EDGE_AGENT_CONFIG",
        "X509_CERT_FILE",
        "X509_KEY_FILE",
    ] {
        command.env_remove(var);
    }
    command
        .env("IOTHUB_CA_FILE", &ca)
        .env("POSITION_SOURCE", "sim")
        .env("REPORT_INTERVAL", "100ms")
        .env("BUFFER_DIR", dir.join("buffer"))
        .envs(settings.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits until `device`'s partition holds five events, and checks that they are the
/// device's positions in order, authenticated by `auth`.
async fn five_positions_routed(hub: &HubSim, device: &str, auth: AuthMethod) {
    let index = hub.partitions().partition_of(device);
    let partition = hub.partitions().get(index).unwrap();
    let mut changes = partition.watch();
    tokio::time::timeout(Duration::from_secs(60), async {
        while partition.info().depth < 5 {
            changes.changed().await.unwrap();
        }
    })
    .await
    .expect("five positions routed to the device's partition");
    let mut events = Vec::new();
    partition.read(0, 100, &mut events);
    let mut last_seq = 0;
    for event in &events {
        assert_eq!(&*event.message.device_id, device);
        assert_eq!(event.message.auth, auth);
        let body: serde_json::Value = serde_json::from_slice(&event.message.body).unwrap();
        assert_eq!(body["deviceId"], device, "{body}");
        let seq = body["seq"].as_u64().unwrap();
        assert!(seq > last_seq, "seq {seq} after {last_seq}");
        last_seq = seq;
    }
    assert_eq!(hub.connected_devices(), 1);
}

async fn start_hub(dir: &Path) -> HubSim {
    HubSim::start(HubConfig::new(dir.join("hub")))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_publishes_through_the_local_hub_with_sas_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let connection_string = hub.add_device(DEVICE).unwrap();
    let mut agent = agent(
        &hub,
        dir.path(),
        &[
            ("IOTHUB_DEVICE_CONNECTION_STRING", connection_string),
            ("IOTHUB_PORT", hub.mqtt_addr().port().to_string()),
        ],
    );
    five_positions_routed(&hub, DEVICE, AuthMethod::Sas).await;
    agent.start_kill().unwrap();
    agent.wait().await.unwrap();
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_publishes_through_the_local_hub_over_websockets() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let connection_string = hub.add_device(DEVICE).unwrap();
    let mut agent = agent(
        &hub,
        dir.path(),
        &[
            ("IOTHUB_DEVICE_CONNECTION_STRING", connection_string),
            ("IOTHUB_TRANSPORT", "websockets".into()),
            ("IOTHUB_PORT", hub.ws_addr().port().to_string()),
        ],
    );
    five_positions_routed(&hub, DEVICE, AuthMethod::Sas).await;
    agent.start_kill().unwrap();
    agent.wait().await.unwrap();
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_publishes_through_the_local_hub_with_an_x509_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let issued = hub.ca().issue(&[DEVICE.to_string()], DEVICE).unwrap();
    hub.add_x509_device(DEVICE, &hub_sim::thumbprint(&issued.cert))
        .unwrap();
    let (cert, key) = (
        dir.path().join("device.pem"),
        dir.path().join("device-key.pem"),
    );
    std::fs::write(&cert, &issued.cert_pem).unwrap();
    std::fs::write(&key, &issued.key_pem).unwrap();
    let connection_string = format!("HostName={};DeviceId={DEVICE}", hub.config().host);
    let mut agent = agent(
        &hub,
        dir.path(),
        &[
            ("IOTHUB_DEVICE_CONNECTION_STRING", connection_string),
            ("IOTHUB_PORT", hub.mqtt_addr().port().to_string()),
            ("X509_CERT_FILE", cert.display().to_string()),
            ("X509_KEY_FILE", key.display().to_string()),
        ],
    );
    five_positions_routed(&hub, DEVICE, AuthMethod::X509).await;
    agent.start_kill().unwrap();
    agent.wait().await.unwrap();
    hub.shutdown().await;
}

/// Without the hub's CA the agent does not trust the hub's certificate: nothing arrives.
/// The same agent with `IOTHUB_CA_FILE` is the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_a_hub_whose_ca_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let connection_string = hub.add_device(DEVICE).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args(["check", "--timeout", "10s"])
        .env_remove("MQTT_URL")
        .env_remove("DEVICE_ID")
        .env_remove("EDGE_AGENT_CONFIG")
        .env_remove("IOTHUB_CA_FILE")
        .env("IOTHUB_DEVICE_CONNECTION_STRING", &connection_string)
        .env("IOTHUB_PORT", hub.mqtt_addr().port().to_string())
        .env("POSITION_SOURCE", "sim")
        .env("BUFFER_DIR", dir.path().join("buffer"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("connection"), "{stdout}");
    assert_eq!(hub.stats().messages_accepted, 0);
    hub.shutdown().await;
}

/// SAS renewal against a hub that disconnects a device when its token expires: with
/// 60 s tokens renewed at 10 % of their life, the agent reconnects with a fresh token
/// every 6 s, before any expiry, and the positions arrive without a gap in `seq`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sas_tokens_are_renewed_before_the_hub_would_disconnect_and_no_seq_is_missed() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let connection_string = hub.add_device(DEVICE).unwrap();
    let mut agent = agent(
        &hub,
        dir.path(),
        &[
            ("IOTHUB_DEVICE_CONNECTION_STRING", connection_string),
            ("IOTHUB_PORT", hub.mqtt_addr().port().to_string()),
            ("SAS_TOKEN_TTL", "60s".into()),
            ("SAS_RENEW_FRACTION", "0.1".into()),
        ],
    );
    let partition = hub
        .partitions()
        .get(hub.partitions().partition_of(DEVICE))
        .unwrap();
    let mut changes = partition.watch();
    // Two renewals (three connections), and every seq up to the newest arrived.
    let seqs = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let mut events = Vec::new();
            partition.read(0, 10_000, &mut events);
            let mut seqs: Vec<u64> = events
                .iter()
                .map(|e| {
                    let body: serde_json::Value = serde_json::from_slice(&e.message.body).unwrap();
                    body["seq"].as_u64().unwrap()
                })
                .collect();
            seqs.sort_unstable();
            let contiguous = seqs.iter().enumerate().all(|(i, s)| *s == i as u64 + 1);
            if hub.stats().connections_accepted >= 3 && contiguous && seqs.len() > 60 {
                return seqs;
            }
            changes.changed().await.unwrap();
        }
    })
    .await
    .expect("two renewals and every seq delivered");
    let stats = hub.stats();
    assert!(
        stats.connections_refused.is_empty(),
        "the hub refused or closed a connection: {:?}",
        stats.connections_refused
    );
    assert_eq!(seqs.first(), Some(&1));
    agent.start_kill().unwrap();
    agent.wait().await.unwrap();
    hub.shutdown().await;
}

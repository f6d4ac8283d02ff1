//! The agent in IoT Hub mode against the local hub (`crates/hub-sim`): a device connection
//! string with SAS, TLS trusting the hub's CA (`IOTHUB_CA_FILE`) on the hub's port
//! (`IOTHUB_PORT`). The hub checks the token, the client id, the username and the topic,
//! refuses what IoT Hub refuses, and routes what it accepts to its device's partition.

use std::process::Stdio;
use std::time::Duration;

use hub_sim::routing::AuthMethod;
use hub_sim::{HubConfig, HubSim};

const DEVICE: &str = "drone-0007";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_publishes_through_the_local_hub_with_sas_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let hub = HubSim::start(HubConfig::new(dir.path().join("hub")))
        .await
        .unwrap();
    let connection_string = hub.add_device(DEVICE).unwrap();
    let ca = dir.path().join("hub-ca.pem");
    std::fs::write(&ca, hub.ca_pem()).unwrap();

    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .env_remove("MQTT_URL")
        .env_remove("DEVICE_ID")
        .env_remove("EDGE_AGENT_CONFIG")
        .env("IOTHUB_DEVICE_CONNECTION_STRING", &connection_string)
        .env("IOTHUB_CA_FILE", &ca)
        .env("IOTHUB_PORT", hub.mqtt_addr().port().to_string())
        .env("POSITION_SOURCE", "sim")
        .env("REPORT_INTERVAL", "100ms")
        .env("BUFFER_DIR", dir.path().join("buffer"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let index = hub.partitions().partition_of(DEVICE);
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
        assert_eq!(&*event.message.device_id, DEVICE);
        assert_eq!(event.message.auth, AuthMethod::Sas);
        let body: serde_json::Value = serde_json::from_slice(&event.message.body).unwrap();
        assert_eq!(body["deviceId"], DEVICE, "{body}");
        let seq = body["seq"].as_u64().unwrap();
        assert!(seq > last_seq, "seq {seq} after {last_seq}");
        last_seq = seq;
    }
    assert_eq!(hub.connected_devices(), 1);
    agent.start_kill().unwrap();
    agent.wait().await.unwrap();
    hub.shutdown().await;
}

/// Without the hub's CA the agent does not trust the hub's certificate: nothing arrives.
/// The same agent with `IOTHUB_CA_FILE` is the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_a_hub_whose_ca_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let hub = HubSim::start(HubConfig::new(dir.path().join("hub")))
        .await
        .unwrap();
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

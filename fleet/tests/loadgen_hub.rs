//! `fleet loadgen` through the local IoT Hub (`crates/hub-sim`) as it publishes to a real
//! hub: the device connection strings of the hub's `devices.txt` (or each drone registered
//! through the hub's DPS with the key derived from a group's), SAS tokens, MQTT over TLS
//! trusting the hub's CA (`--iothub-ca-file`) on the hub's port (`--iothub-port`). The
//! hub's own statistics and partitions say what it accepted; the report must agree.

use std::collections::BTreeMap;
use std::time::Duration;

use hub_sim::AuthMethod;
use hub_sim::{HubConfig, HubSim};

const DRONES: usize = 20;
const COUNT: u64 = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_publishes_through_the_local_hub_with_device_connection_strings() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(dir.path().join("hub"));
    config.devices = DRONES;
    config.device_prefix = "drone-".into();
    let hub = HubSim::start(config).await.unwrap();
    let state = hub.config().state_dir.clone();
    let report = dir.path().join("report.json");
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("loadgen")
        .arg("--device-connection-strings")
        .arg(state.join("devices.txt"))
        .arg("--iothub-ca-file")
        .arg(state.join("ca.pem"))
        .args(["--iothub-port", &hub.mqtt_addr().port().to_string()])
        .args(["--drones", &DRONES.to_string(), "--rate", "200"])
        .args(["--count", &COUNT.to_string(), "--duration", "60s"])
        .arg("--report-json")
        .arg(&report)
        .env_remove("FLEET_URL")
        .env_remove("FLEET_WRITER_METRICS")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("loadgen ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("drones {DRONES}   sent {COUNT}   acked {COUNT}")),
        "{stdout}"
    );

    // The report's figures.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(report["drones"], DRONES);
    assert_eq!(report["sent"], COUNT);
    assert_eq!(report["acked"], COUNT);
    assert_eq!(report["connection_errors"], 0);
    let rate = report["acked_per_sec"].as_f64().unwrap();
    let elapsed = report["elapsed_secs"].as_f64().unwrap();
    assert!(
        (rate * elapsed - COUNT as f64).abs() < 1.0,
        "{rate}/s over {elapsed} s"
    );
    let p50 = report["publish_latency_p50"].as_f64().unwrap();
    let p99 = report["publish_latency_p99"].as_f64().unwrap();
    assert!(0.0 < p50 && p50 <= p99 && p99 < 30.0, "{p50} {p99}");

    // The hub accepted exactly what the report counts as acknowledged, from every device
    // of devices.txt, authenticated by SAS.
    let stats = hub.stats();
    assert_eq!(stats.messages_accepted, COUNT, "{stats:?}");
    assert!(stats.messages_refused.is_empty(), "{stats:?}");
    // One connection per drone, each handshake completed (a drone whose connection is
    // made while it publishes must not abandon its TLS handshake half done).
    assert_eq!(stats.connections_accepted, DRONES as u64, "{stats:?}");
    assert!(stats.connections_refused.is_empty(), "{stats:?}");
    let depth: usize = stats.partitions.iter().map(|p| p.depth).sum();
    assert_eq!(depth as u64, COUNT, "{stats:?}");
    let mut seqs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for index in 0..hub.partitions().count() {
        let mut events = Vec::new();
        hub.partitions()
            .get(index)
            .unwrap()
            .read(0, usize::MAX, &mut events);
        for event in events {
            assert_eq!(event.message.auth, AuthMethod::Sas);
            let body: serde_json::Value = serde_json::from_slice(&event.message.body).unwrap();
            assert_eq!(body["deviceId"], &*event.message.device_id, "{body}");
            seqs.entry(event.message.device_id.to_string())
                .or_default()
                .push(body["seq"].as_u64().unwrap());
        }
    }
    let expected: Vec<String> = (0..DRONES).map(|i| format!("drone-{i}")).collect();
    assert_eq!(seqs.keys().cloned().collect::<Vec<_>>(), {
        let mut e = expected;
        e.sort();
        e
    });
    // Each drone's positions arrived once each, in order, from 1 with no gap.
    for (device, seqs) in &seqs {
        let want: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, &want, "{device}");
    }
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_registers_each_drone_through_dps_and_publishes_to_the_assigned_hub() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(dir.path().join("hub"));
    config.dps.retry_after = Duration::from_millis(100);
    let hub = HubSim::start(config).await.unwrap();
    let group_key = hub.add_symmetric_key_group("loadgen").unwrap();
    let key_file = dir.path().join("group.key");
    std::fs::write(&key_file, format!("{group_key}\n")).unwrap();
    let state = hub.config().state_dir.clone();
    let report = dir.path().join("report.json");
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("loadgen")
        .args(["--dps-id-scope", hub.id_scope()])
        .arg("--dps-group-key-file")
        .arg(&key_file)
        .args([
            "--dps-endpoint",
            &format!("localhost:{}", hub.dps_addr().port()),
        ])
        // The local hub's name, where DPS assigns the drones.
        .args(["--dps-allowed-hub-suffix", &hub.config().host])
        .arg("--iothub-ca-file")
        .arg(state.join("ca.pem"))
        .args(["--iothub-port", &hub.mqtt_addr().port().to_string()])
        .args(["--drones", &DRONES.to_string(), "--rate", "200"])
        .args(["--count", &COUNT.to_string(), "--duration", "60s"])
        .arg("--report-json")
        .arg(&report)
        .env_remove("FLEET_URL")
        .env_remove("FLEET_WRITER_METRICS")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("loadgen ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "drones registered through DPS: {DRONES} of {DRONES} in"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("failures none"), "{stdout}");
    assert!(
        stdout.contains(&format!("drones {DRONES}   sent {COUNT}   acked {COUNT}")),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(report["registration"]["registered"], DRONES);

    // The service assigned every drone under its registration id; the hub accepted every
    // acknowledged position from exactly those devices.
    let expected: Vec<String> = (0..DRONES).map(|i| format!("loadgen-{i:05}")).collect();
    let mut registered: Vec<String> = hub
        .dps_registrations()
        .into_iter()
        .map(|r| {
            assert_eq!(r.device_id, r.registration_id);
            r.registration_id
        })
        .collect();
    registered.sort();
    assert_eq!(registered, expected);
    let stats = hub.stats();
    assert_eq!(stats.registrations_assigned, DRONES as u64, "{stats:?}");
    assert!(stats.registrations_refused.is_empty(), "{stats:?}");
    assert_eq!(stats.messages_accepted, COUNT, "{stats:?}");
    let mut devices = std::collections::BTreeSet::new();
    for index in 0..hub.partitions().count() {
        let mut events = Vec::new();
        hub.partitions()
            .get(index)
            .unwrap()
            .read(0, usize::MAX, &mut events);
        devices.extend(events.into_iter().map(|e| e.message.device_id.to_string()));
    }
    assert_eq!(devices.into_iter().collect::<Vec<_>>(), expected);
    hub.shutdown().await;
}

//! Connection state and twin change events read from the local hub's Event Hubs endpoint
//! (`crates/hub-sim`, which puts `iothub-message-source` and the events' application
//! properties on the wire as IoT Hub does) end as agent facts on the drones' latest
//! documents: an older disconnection enqueued after a newer connection leaves the drone
//! connected, the reported `agent.version` is stored, positions are written beside them,
//! and an event off the schema is dead-lettered, not dropped silently.

mod common;

use std::time::Duration;
use test_harness::eventually;

use chrono::Utc;
use cloud_writer::DropReason;
use cloud_writer::Secret;
use common::*;
use cosmos_sim::CosmosSim;
use hub_sim::{AuthMethod, Incoming, MessageSource};
use hub_sim::{HubConfig, HubSim, Route};
use serde_json::{Value, json};

/// An event as IoT Hub routes it (the properties of "IoT Hub non-telemetry event schemas").
fn routed(device: &str, source: MessageSource, schema: &str, op: &str, body: Value) -> Incoming {
    let mut message = Incoming::new(device, serde_json::to_vec(&body).unwrap());
    message.auth = AuthMethod::Api;
    message.source = source;
    message.content_type = Some("application/json".into());
    message.content_encoding = Some("utf-8".into());
    message.properties = vec![
        ("hubName".into(), "hub".into()),
        ("deviceId".into(), device.into()),
        (
            "operationTimestamp".into(),
            "2026-11-28T06:43:04.5561024Z".into(),
        ),
        ("iothub-message-schema".into(), schema.into()),
        ("opType".into(), op.into()),
    ];
    message
}

fn connection(device: &str, op: &str, sequence: u8) -> Incoming {
    let sequence =
        format!("000000000000000001D8713FF7E08514000000020000000000000000000000{sequence:02X}");
    routed(
        device,
        MessageSource::DeviceConnectionStateEvents,
        "deviceConnectionStateNotification",
        op,
        json!({"sequenceNumber": sequence}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_state_and_version_from_the_hub_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(dir.path().join("hub"));
    config.routes = vec![Route::ConnectionState, Route::TwinChanges];
    let hub = HubSim::start(config).await.unwrap();
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();

    let now = Utc::now();
    let id = device(1);
    let partitions = hub.partitions();
    partitions.route(connection(&id, "deviceConnected", 7));
    let mut position = Incoming::new(&id, wire(&id, 1, now, 47.6, -122.3));
    position.auth = AuthMethod::Sas;
    partitions.route(position);
    // An older disconnection, enqueued after the newer connection.
    partitions.route(connection(&id, "deviceDisconnected", 6));
    partitions.route(routed(
        &id,
        MessageSource::TwinChangeEvents,
        "twinChangeNotification",
        "updateTwin",
        json!({"version": 4, "properties": {"reported": {"agent": {"version": "0.1.0"}, "$version": 3}}}),
    ));
    // A drone whose agent connected before its first position, and an event off the schema.
    partitions.route(connection(&device(2), "deviceConnected", 8));
    partitions.route(connection(&device(3), "deviceRebooted", 9));

    let dead_letters = dir.path().join("dead.jsonl");
    let mut settings = settings(&sim.endpoint(), "mqtt://unused:1883", "agent");
    settings.writer_source = Some(Secret::new(hub.eventhub_connection_string()));
    settings.eventhubs_start_position = Some("earliest".into());
    settings.dead_letter_file = Some(dead_letters.clone());
    let writer = cloud_writer::Writer::start(settings.resolve().unwrap())
        .await
        .unwrap();
    let counts = wait_received_final(&writer, 6).await;
    assert_eq!(counts.written, 1, "{counts:?}");
    // Four facts: the older disconnection is superseded, or written first when it reaches
    // the server before the connection (events of one batch are written together).
    assert_eq!(
        counts.agent_written + counts.dropped(DropReason::Superseded),
        4,
        "{counts:?}"
    );
    assert_eq!(counts.dropped(DropReason::InvalidEvent), 1, "{counts:?}");

    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "agent")).await;
    let doc = |d: usize| {
        docs.get(&device(d))
            .unwrap_or_else(|| panic!("no document of {}: {docs:?}", device(d)))
    };
    assert_eq!(doc(1)["agentConnected"], true, "{}", doc(1));
    assert_eq!(doc(1)["agentConnectedAt"], "2026-11-28T06:43:04.556Z");
    assert_eq!(doc(1)["agentVersion"], "0.1.0");
    assert_eq!(doc(1)["seq"], 1);
    assert_eq!(doc(2)["agentConnected"], true);
    assert!(doc(2).get("location").is_none(), "{}", doc(2));
    writer.shutdown();
    writer.wait().await.unwrap();
    let dead = std::fs::read_to_string(&dead_letters).unwrap();
    assert!(
        dead.contains("invalid_event") && dead.contains("deviceRebooted"),
        "{dead}"
    );
    hub.shutdown().await;
}

/// The whole way: an edge agent connects to the local hub over MQTT (TLS, SAS), reports its
/// version in its twin and publishes positions, then stops; with both routes on, the writer
/// stores its position, the version the hub holds in the twin, and that it disconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_connects_reports_and_stops_is_stored_disconnected_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(dir.path().join("hub"));
    config.routes = vec![Route::ConnectionState, Route::TwinChanges];
    let hub = HubSim::start(config).await.unwrap();
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let id = "drone-e2e";
    let cs = hub.add_device(id).unwrap();

    let mut settings = settings(&sim.endpoint(), "mqtt://unused:1883", "agent-e2e");
    settings.writer_source = Some(Secret::new(hub.eventhub_connection_string()));
    settings.eventhubs_start_position = Some("earliest".into());
    let writer = cloud_writer::Writer::start(settings.resolve().unwrap())
        .await
        .unwrap();

    let stop = edge_agent::CancellationToken::new();
    let agent_settings = edge_agent::Settings {
        connection_string: Some(edge_agent::Secret::new(cs)),
        iothub_ca_file: Some(hub.config().state_dir.join("ca.pem")),
        iothub_port: Some(hub.mqtt_addr().port()),
        position_source: Some("sim".into()),
        report_interval: Some("200ms".parse().unwrap()),
        buffer_dir: Some(dir.path().join("agent")),
        buffer_fsync: Some(false),
        ..edge_agent::Settings::default()
    };
    let agent = edge_agent::Agent::new(agent_settings.resolve().unwrap()).unwrap();
    let running = tokio::spawn(agent.run(stop.clone()));
    let container = container(&sim.endpoint(), "telemetry", "agent-e2e");
    let reported = |doc: &Option<Value>| {
        doc.as_ref().is_some_and(|d| {
            d["agentConnected"] == true && d["agentVersion"].is_string() && d["seq"].is_u64()
        })
    };
    eventually(
        "the agent connected, its version and a position stored",
        Duration::from_secs(60),
        || async { latest_documents(&container).await.remove(id) },
        reported,
    )
    .await;
    stop.cancel();
    let _ = running.await;
    let doc = eventually(
        "the disconnection stored",
        Duration::from_secs(60),
        || async { latest_documents(&container).await.remove(id) },
        |doc| doc.as_ref().is_some_and(|d| d["agentConnected"] == false),
    )
    .await
    .unwrap();
    // The version the hub holds in the twin's reported properties.
    let twin = hub.twin(id).unwrap();
    assert_eq!(
        doc["agentVersion"],
        twin["properties"]["reported"]["agent"]["version"]
    );
    assert!(
        doc["agentDisconnectedAt"].is_string() && doc["location"].is_object(),
        "{doc}"
    );
    writer.shutdown();
    writer.wait().await.unwrap();
    hub.shutdown().await;
}

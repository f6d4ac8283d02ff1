//! The blob checkpoints held to Microsoft's Python SDK (`azure-eventhub` with
//! `azure-eventhub-checkpointstoreblob`, in `target/venv-checkpointstore`) on the local
//! hub (`crates/hub-sim`) and Azurite: what the writer checkpointed, the Python
//! `EventHubConsumerClient` with `BlobCheckpointStore` continues from, receiving exactly
//! the events after it; and what Python checkpointed, the writer continues from. Nothing
//! lost, nothing read again.
//!
//! Both clients read a production-form connection string (`Endpoint=sb://{namespace}/`, no
//! `UseDevelopmentEmulator`) and dial the hub through their custom-endpoint settings, so
//! that the blob names carry the namespace as they do against Event Hubs. With an emulator
//! connection string the SDKs disagree: Python names the namespace `host:port`, the writer
//! (as .NET's `FullyQualifiedNamespace`) `host`, and neither would see the other's
//! checkpoints.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;
use test_harness::eventually;

use common::replica::{BlobRig, Replica, hub_events, route_round};
use hub_sim::HubSim;
use test_harness::Azurite;

const DRONES: usize = 20;
const ROUNDS: u64 = 10;
const PATIENCE: Duration = Duration::from_secs(120);
/// The namespace both clients name; the hub plays it.
const NAMESPACE: &str = "fleet-telemetry.servicebus.windows.net";

/// The hub's connection string in the service's form, for [`NAMESPACE`].
fn service_form(hub: &HubSim) -> String {
    let emulator = hub.eventhub_connection_string();
    let rest: Vec<&str> = emulator
        .split(';')
        .filter(|part| {
            !part.starts_with("Endpoint=") && !part.starts_with("UseDevelopmentEmulator=")
        })
        .collect();
    format!("Endpoint=sb://{NAMESPACE}/;{}", rest.join(";"))
}

/// A writer reading [`NAMESPACE`] through the hub, its checkpoints in `checkpoints`.
fn start_writer(rig: &BlobRig, name: &str) -> Replica {
    let source = service_form(&rig.hub);
    let endpoint = format!("amqp://{}", rig.hub.amqp_addr());
    rig.writer_with(
        name,
        "checkpoints",
        &[
            ("WRITER_SOURCE", source.as_str()),
            ("EVENTHUBS_CUSTOM_ENDPOINT", endpoint.as_str()),
        ],
    )
}

/// [`ROUNDS`] positions of each of [`DRONES`] drones, seqs from `first`, routed into the hub.
fn route(hub: &HubSim, first: u64) {
    for seq in first..first + ROUNDS {
        route_round(hub, DRONES, seq);
    }
}

/// Every partition's sequence numbers, in order.
fn sequence_numbers(hub: &HubSim) -> HashMap<String, Vec<i64>> {
    hub_events(hub)
        .into_iter()
        .map(|(p, events)| (p, events.iter().map(|e| e.sequence_number).collect()))
        .collect()
}

/// Runs the Python consumer until it has received `wanted` events (or the stream is quiet);
/// returns what it received per partition.
async fn python_receives(
    hub: &HubSim,
    azurite: &Azurite,
    wanted: usize,
) -> HashMap<String, Vec<i64>> {
    let mut command = Command::new(common::blobs::python());
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/checkpointstore.py"
        ))
        .arg(wanted.to_string())
        .env("HUB_SIM_EVENTHUB", service_form(hub))
        .env(
            "EVENTHUB_CUSTOM_ENDPOINT",
            format!("sb://{}", hub.amqp_addr()),
        )
        .env(
            "CHECKPOINT_BLOB_CONNECTION_STRING",
            azurite.connection_string(),
        )
        .env("CHECKPOINT_BLOB_CONTAINER", "checkpoints")
        .env("PYTHONUNBUFFERED", "1");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "checkpointstore.py failed:\n{stdout}\n{stderr}"
    );
    let outcome: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|_| panic!("no JSON outcome:\n{stdout}\n{stderr}"));
    eprintln!("python: {outcome}");
    serde_json::from_value(outcome["received"].clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_pass_between_the_writer_and_the_python_sdk() {
    let rig = BlobRig::start().await;
    let (hub, azurite) = (&rig.hub, &rig.azurite);
    let batch = DRONES * ROUNDS as usize;

    // 1. The writer reads the first batch, settles it and stops: its checkpoints name the
    //    last event of each partition.
    route(hub, 1);
    let mut writer = start_writer(&rig, "writer-1");
    eventually(
        "the writer settling the first batch",
        PATIENCE,
        async || writer.counts().await,
        |c| c.settled() == batch as u64,
    )
    .await;
    writer.stop(PATIENCE).await;
    let first = sequence_numbers(hub);

    // 2. Python continues from the writer's checkpoints: exactly the second batch.
    route(hub, 1 + ROUNDS);
    let all = sequence_numbers(hub);
    let python = python_receives(hub, azurite, batch).await;
    for (partition, seqs) in &all {
        let before = first.get(partition).map_or(0, Vec::len);
        let mut got = python.get(partition).cloned().unwrap_or_default();
        got.sort();
        assert_eq!(
            got,
            seqs[before..],
            "partition {partition}: Python received what follows the writer's checkpoint, once"
        );
    }

    // 3. The writer continues from Python's checkpoints: exactly the third batch.
    route(hub, 1 + 2 * ROUNDS);
    let mut writer = start_writer(&rig, "writer-2");
    eventually(
        "the writer settling the third batch",
        PATIENCE,
        async || writer.counts().await,
        |c| c.settled() >= batch as u64,
    )
    .await;
    // Anything read again would arrive with the batch (the partitions were read from
    // their checkpoints at once); the count holds at the batch.
    let counts = writer.counts().await;
    assert_eq!(
        counts.received, batch as u64,
        "nothing read again: {counts:?}"
    );
    writer.stop(PATIENCE).await;
    rig.sim.shutdown().await;
    rig.hub.shutdown().await;
}

//! `cloud-writer checkpoints show|copy`: checkpoints in the Cosmos container copied to Blob
//! Storage (Azurite), where Microsoft's storage client (the one the Python checkpoint store
//! ships) finds them in the SDKs' layout, and shown from either store.

mod common;

use std::process::{Command, Output};

use azure_messaging_eventhubs::CheckpointStore;
use cloud_writer::internals::{CosmosCheckpointStore, Scope};
use common::KEY;
use cosmos_sim::CosmosSim;
use test_harness::Azurite;

const SOURCE: &str = "Endpoint=sb://fleet-telemetry.servicebus.windows.net/;SharedAccessKeyName=writers;SharedAccessKey=a2V5;EntityPath=positions";

fn cloud_writer(sim: &CosmosSim, azurite: &Azurite, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_cloud-writer"))
        .args(args)
        .env_clear()
        .env("COSMOS_ENDPOINT", sim.endpoint())
        .env("COSMOS_KEY", KEY)
        .env("COSMOS_DATABASE", "telemetry")
        .env("COSMOS_CONTAINER", "positions")
        .env("COSMOS_CREATE_IF_MISSING", "true")
        .env("WRITER_SOURCE", SOURCE)
        .env("EVENTHUBS_CONSUMER_GROUP", "Writers")
        .env(
            "CHECKPOINT_BLOB_CONNECTION_STRING",
            azurite.connection_string(),
        )
        .env("CHECKPOINT_BLOB_CONTAINER", "eventhubs-checkpoints")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_copied_from_cosmos_are_where_every_sdk_reads_them() {
    let sim = CosmosSim::unthrottled().await.unwrap();
    let azurite = Azurite::start().unwrap();
    // The writer's Cosmos store holds four partitions' checkpoints.
    let cosmos = cloud_writer::internals::cosmos_client(
        &cloud_writer::Settings {
            cosmos_endpoint: Some(sim.endpoint().parse().unwrap()),
            cosmos_key: Some(cloud_writer::Secret::new(KEY)),
            cosmos_database: Some("telemetry".into()),
            cosmos_container: Some("positions".into()),
            writer_source: Some(cloud_writer::Secret::new(SOURCE)),
            ..cloud_writer::Settings::default()
        }
        .resolve()
        .unwrap()
        .cosmos,
    )
    .unwrap();
    let store = CosmosCheckpointStore::open(&cosmos, "telemetry", "checkpoints", true)
        .await
        .unwrap();
    let scope = Scope::new(
        "fleet-telemetry.servicebus.windows.net",
        "positions",
        "Writers",
    );
    for partition in 0..4 {
        let sequence = 1_000 + partition;
        store
            .update_checkpoint(scope.checkpoint(
                &partition.to_string(),
                Some(sequence),
                Some(format!("{}", sequence * 200)),
            ))
            .await
            .unwrap();
    }

    let copied = cloud_writer(
        &sim,
        &azurite,
        &["checkpoints", "copy", "--from", "cosmos", "--to", "blob"],
    );
    let said = String::from_utf8_lossy(&copied.stdout);
    assert!(said.contains("4 partition(s) (0, 1, 2, 3)"), "{said}");

    // In the SDKs' layout, names in lower case, the metadata every SDK and KEDA read.
    let listed = common::blobs::list(&azurite, "eventhubs-checkpoints");
    for partition in 0..4i64 {
        let name = format!(
            "fleet-telemetry.servicebus.windows.net/positions/writers/checkpoint/{partition}"
        );
        let metadata = listed
            .get(&name)
            .unwrap_or_else(|| panic!("no {name} in {listed:?}"));
        assert_eq!(metadata["sequencenumber"], (1_000 + partition).to_string());
        assert_eq!(metadata["offset"], ((1_000 + partition) * 200).to_string());
    }

    // Shown from the blob store: each partition with its sequence number and offset.
    let shown = cloud_writer(&sim, &azurite, &["checkpoints", "show", "--store", "blob"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    for partition in 0..4 {
        let sequence = 1_000 + partition;
        let line = shown
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&partition.to_string()))
            .unwrap_or_else(|| panic!("no partition {partition}: {shown}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (sequence, offset) = (sequence.to_string(), (sequence * 200).to_string());
        assert_eq!(
            fields[1..4],
            [sequence.as_str(), offset.as_str(), "-"],
            "{shown}"
        );
    }
}

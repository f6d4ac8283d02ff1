//! The Event Hubs source against the local hub (`crates/hub-sim`, held to Microsoft's
//! Event Hubs SDK): the connection string the hub writes (`UseDevelopmentEmulator=true`)
//! is dialled as plain AMQP, the SDK's `EventProcessor` claims the partitions through our
//! checkpoint store, and every position the hub enqueued ends in Cosmos DB.

mod common;

use cloud_writer::Secret;
use common::replica::route_recent;
use common::*;
use cosmos_sim::CosmosSim;
use hub_sim::{HubConfig, HubSim};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_enqueued_in_the_local_hub_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let hub = HubSim::start(HubConfig::new(dir.path().join("hub")))
        .await
        .unwrap();
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();

    // 40 drones, 5 positions each, enqueued as the hub does for SAS devices.
    let expected = route_recent(&hub, 40, 5);

    let mut settings = settings(&sim.endpoint(), "mqtt://unused:1883", "hub");
    settings.writer_source = Some(Secret::new(hub.eventhub_connection_string()));
    settings.eventhubs_start_position = Some("earliest".into());
    let writer = cloud_writer::Writer::start(settings.resolve().unwrap())
        .await
        .unwrap();
    wait_written(&writer, 200).await;
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "hub")).await;
    assert_newest(&docs, &expected);
    writer.shutdown();
    writer.wait().await.unwrap();
    hub.shutdown().await;
}

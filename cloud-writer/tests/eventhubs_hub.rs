//! The Event Hubs source against the local hub (`crates/hub-sim`, held to Microsoft's
//! Event Hubs SDK): the connection string the hub writes (`UseDevelopmentEmulator=true`)
//! is dialled as plain AMQP, the SDK's `EventProcessor` claims the partitions through our
//! checkpoint store, and every position the hub enqueued ends in Cosmos DB.

mod common;

use std::time::Duration;
use test_harness::eventually;

use chrono::Utc;
use cloud_writer::DropReason;
use cloud_writer::Secret;
use common::*;
use cosmos_sim::CosmosSim;
use hub_sim::{AuthMethod, Incoming};
use hub_sim::{HubConfig, HubSim};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_enqueued_in_the_local_hub_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let hub = HubSim::start(HubConfig::new(dir.path().join("hub")))
        .await
        .unwrap();
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();

    // 40 drones, 5 positions each, enqueued as the hub does for SAS devices.
    let now = Utc::now();
    let mut expected = std::collections::HashMap::new();
    for d in 0..40 {
        let id = device(d);
        for seq in 1..=5u64 {
            let ts = now - chrono::Duration::seconds(30 - 5 * seq as i64);
            let (lat, lon) = (47.6 + d as f64 * 1e-3, -122.3 + seq as f64 * 1e-4);
            let mut message = Incoming::new(&id, wire(&id, seq, ts, lat, lon));
            message.auth = AuthMethod::Sas;
            hub.partitions().route(message);
            expected.insert(id.clone(), (ts.timestamp_millis(), seq, lat, lon));
        }
    }

    let mut settings = settings(&sim.endpoint(), "mqtt://unused:1883", "hub");
    settings.writer_source = Some(Secret::new(hub.eventhub_connection_string()));
    settings.eventhubs_start_position = Some("earliest".into());
    let writer = cloud_writer::Writer::start(settings.resolve().unwrap())
        .await
        .unwrap();
    let counts = eventually(
        "every enqueued position to have a final outcome",
        Duration::from_secs(60),
        async || writer.counts(),
        |c| c.received == 200 && c.finished() == 200 && c.in_flight == 0,
    )
    .await;
    assert_eq!(
        counts.written + counts.dropped(DropReason::Superseded),
        200,
        "{counts:?}"
    );
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "hub")).await;
    assert_newest(&docs, &expected);
    writer.shutdown();
    writer.wait().await.unwrap();
    hub.shutdown().await;
}

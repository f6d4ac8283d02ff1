//! Taking over from the Azure Functions app of the original design: its Event Hubs trigger
//! (extension 5.x and later) leaves its checkpoints in the function app's storage account,
//! container `azure-webjobs-eventhub`, in the SDKs' layout (the extension's
//! `BlobCheckpointStoreInternal`: `{namespace}/{event hub}/{consumer group}/checkpoint/{partition}`,
//! lower case, metadata `offset`, `sequencenumber` and its `clientidentifier`). Those blobs
//! are written here with Microsoft's storage client, as the function left them; the writer
//! pointed at that container goes on after them: nothing the function had checkpointed is
//! read again, and nothing after it is missed.

mod common;

use std::collections::HashMap;
use std::time::Duration;
use test_harness::eventually;

use common::replica::{BlobRig, hub_events, route_round};

const DRONES: usize = 20;
const CONTAINER: &str = "azure-webjobs-eventhub";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_goes_on_from_the_functions_checkpoints() {
    let rig = BlobRig::start().await;
    let (hub, sim, azurite) = (&rig.hub, &rig.sim, &rig.azurite);
    let route = |seq: u64| route_round(hub, DRONES, seq);

    // The function read and checkpointed the first two rounds of every partition.
    route(1);
    route(2);
    let namespace = hub.config().host.to_lowercase();
    let event_hub = hub.config().hub_name.to_lowercase();
    let mut checkpointed = 0;
    for (partition, events) in hub_events(hub) {
        let Some(last) = events.last() else {
            continue;
        };
        checkpointed += events.len();
        let metadata = HashMap::from([
            ("sequencenumber", last.sequence_number.to_string()),
            ("offset", last.offset.to_string()),
            ("clientidentifier", "functionapp-host-1".to_owned()),
        ]);
        common::blobs::put(
            azurite,
            CONTAINER,
            &format!("{namespace}/{event_hub}/$default/checkpoint/{partition}"),
            &metadata,
        );
    }
    assert_eq!(checkpointed, 2 * DRONES);
    // What came after the function stopped.
    route(3);

    let writer = rig.writer("writer", CONTAINER);
    eventually(
        "the third round written",
        Duration::from_secs(60),
        async || writer.counts().await,
        |c| c.written >= DRONES as u64,
    )
    .await;
    // A fourth round: read after anything of its partition that came before it, so once it
    // is written, whatever the writer would have read again has been read.
    route(4);
    let positions = common::container(&sim.endpoint(), "telemetry", "positions");
    eventually(
        "every drone at its fourth position",
        Duration::from_secs(60),
        async || common::latest_documents(&positions).await,
        |docs| docs.len() == DRONES && docs.values().all(|d| d["seq"] == 4),
    )
    .await;
    let counts = writer.counts().await;
    assert_eq!(counts.received, 2 * DRONES as u64, "{counts:?}");
}

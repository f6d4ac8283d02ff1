//! The writer with Entra ID tokens only, end to end: it reads a local Event Hubs namespace
//! (`WRITER_SOURCE=sb://{namespace}/{event hub}`, the local hub playing a namespace that
//! takes tokens, with shared access signatures refused) and writes the local Cosmos endpoint
//! (local authentication disabled), with AKS workload identity; every position the hub
//! enqueued ends in Cosmos DB. Without the role "Azure Event Hubs Data Receiver" the hub
//! refuses the writer, and the writer stops at start naming that role.

mod common;

use common::entra::{WRITER, namespace_and_account, reader, token_settings, workload_identity};
use common::replica::route_recent;
use common::*;
use entra_sim::EntraSim;
use hub_sim::EventHubsRole;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_reads_the_namespace_and_writes_cosmos_db_with_tokens_only() {
    let (entra, dir) = workload_identity(EntraSim::builder()).await;
    let oid = entra.object_id(WRITER).unwrap().to_owned();
    let (hub, sim) = namespace_and_account(&entra, dir.path()).await;

    let expected = route_recent(&hub, 40, 5);
    let settings = || token_settings(&hub, &sim);

    // No role on the hub yet: refused at start, naming the role.
    let refused = cloud_writer::Writer::start(settings().resolve().unwrap()).await;
    let error = match refused {
        Ok(writer) => writer.wait().await.unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("Azure Event Hubs Data Receiver"), "{error}");

    hub.assign_role(&oid, Some(EventHubsRole::Receiver))
        .unwrap();
    let writer = cloud_writer::Writer::start(settings().resolve().unwrap())
        .await
        .unwrap();
    wait_written(&writer, 200).await;
    assert_newest(
        &latest_documents(&reader(&sim.endpoint(), "hub")).await,
        &expected,
    );
    writer.shutdown();
    writer.wait().await.unwrap();
    hub.shutdown().await;
}

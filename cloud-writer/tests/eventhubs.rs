//! The Event Hubs adapter at its boundaries (no hub is reachable here): the checkpoint
//! store the SDK's `EventProcessor` balances partitions through, against the local Cosmos
//! endpoint and `@vercel/cosmosdb-server`; the writer refusing a wrong connection string
//! or an unusable checkpoint container at start; the source failing, without a panic, on
//! a hub it cannot reach.

mod common;

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::Ownership;
use cloud_writer::Metrics;
use cloud_writer::internals::{CheckpointContainer, EventHubsSource};
use cloud_writer::internals::{CosmosCheckpointStore, Scope};
use cloud_writer::internals::{EventHubsConnection, EventHubsSettings, StartAt};
use cloud_writer::internals::{Source, SourceControl, SourceError};
use common::checkpoints::{assert_no_ownerships, listed_checkpoints, positions, write_checkpoints};
use common::*;
use cosmos_sim::CosmosSim;
use test_harness::CosmosDbServer;
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "drones.servicebus.windows.net";
const HUB: &str = "drones-hub";
const GROUP: &str = "$Default";

fn claim(partition: &str, owner: &str) -> Ownership {
    Scope::new(NAMESPACE, HUB, GROUP).ownership(partition.into(), Some(owner.into()), None, None)
}

fn owner_of(ownerships: &[Ownership], partition: &str) -> Ownership {
    ownerships
        .iter()
        .find(|o| o.partition_id == partition)
        .unwrap_or_else(|| panic!("no ownership of partition {partition}: {ownerships:?}"))
        .clone()
}

/// The SDK's contract, as two replicas `a` and `b` exercise it.
async fn store_shares_partitions_and_keeps_checkpoints(store: &CosmosCheckpointStore) {
    assert_no_ownerships(store, NAMESPACE, HUB, GROUP).await;
    // a claims partitions 0 and 1 first.
    let a = store
        .claim_ownership(&[claim("0", "a"), claim("1", "a")])
        .await
        .unwrap();
    assert_eq!(a.len(), 2, "{a:?}");
    assert!(
        a.iter()
            .all(|o| o.etag.is_some() && o.last_modified_time.is_some())
    );
    // b's first claim of 0 (no ETag) loses: the claim is left out, not an error.
    let b = store.claim_ownership(&[claim("0", "b")]).await.unwrap();
    assert!(b.is_empty(), "{b:?}");
    // b takes 1 over with the ETag it listed (as the load balancer does with an
    // expired or surplus ownership).
    let listed = store.list_ownerships(NAMESPACE, HUB, GROUP).await.unwrap();
    assert_eq!(owner_of(&listed, "1").owner_id.as_deref(), Some("a"));
    let take_over = Ownership {
        owner_id: Some("b".into()),
        ..owner_of(&listed, "1")
    };
    let b = store.claim_ownership(&[take_over]).await.unwrap();
    assert_eq!(b.len(), 1, "{b:?}");
    assert_ne!(
        b[0].etag,
        owner_of(&listed, "1").etag,
        "a claim changes the ETag"
    );
    // a's renewal of 1 with its now stale ETag is refused; of 0, with its current one, granted.
    let renewed = store
        .claim_ownership(&[owner_of(&a, "1"), owner_of(&a, "0")])
        .await
        .unwrap();
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    assert_eq!(renewed[0].partition_id, "0");
    let listed = store.list_ownerships(NAMESPACE, HUB, GROUP).await.unwrap();
    assert_eq!(owner_of(&listed, "0").owner_id.as_deref(), Some("a"));
    assert_eq!(owner_of(&listed, "1").owner_id.as_deref(), Some("b"));
    assert_eq!(owner_of(&listed, "0").etag, renewed[0].etag);

    // Checkpoints: one per partition, the last write wins.
    let scope = Scope::new(NAMESPACE, HUB, GROUP);
    write_checkpoints(store, &scope, &[("0", 10), ("1", 7), ("0", 12)]).await;
    // Names are case-insensitive, as the service's.
    let checkpoints = listed_checkpoints(store, &NAMESPACE.to_uppercase(), HUB, GROUP).await;
    assert_eq!(
        positions(&checkpoints),
        [("0", Some(12), Some("1200")), ("1", Some(7), Some("700"))]
    );
    // Another consumer group is another scope.
    assert!(
        store
            .list_checkpoints(NAMESPACE, HUB, "archive")
            .await
            .unwrap()
            .is_empty()
    );
    assert_no_ownerships(store, NAMESPACE, HUB, "archive").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_store_on_the_local_endpoint() {
    let sim = CosmosSim::builder().start().await.unwrap();
    let client = container(&sim.endpoint(), "telemetry", "x")
        .client()
        .clone();
    // Missing, not to be created: the message names the setting.
    let err = CosmosCheckpointStore::open(&client, "telemetry", "checkpoints", false)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("EVENTHUBS_CHECKPOINT_CONTAINER") && err.contains("/scope"),
        "{err}"
    );
    // Partitioned on another path: refused, naming both.
    sim.create_container("telemetry", "positions", "/deviceId")
        .unwrap();
    let err = CosmosCheckpointStore::open(&client, "telemetry", "positions", true)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/deviceId") && err.contains("EVENTHUBS_CHECKPOINT_CONTAINER"),
        "{err}"
    );
    let store = CosmosCheckpointStore::open(&client, "telemetry", "checkpoints", true)
        .await
        .unwrap();
    store_shares_partitions_and_keeps_checkpoints(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_store_on_cosmosdb_server() {
    let server = CosmosDbServer::start().unwrap();
    let client = container(&server.endpoint(), "telemetry", "x")
        .client()
        .clone();
    let store = CosmosCheckpointStore::open(&client, "telemetry", "checkpoints", true)
        .await
        .unwrap();
    store_shares_partitions_and_keeps_checkpoints(&store).await;
}

fn writer(endpoint: &str, source: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cloud-writer"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("COSMOS_ENDPOINT", endpoint)
        .env("COSMOS_KEY", KEY)
        .env("WRITER_SOURCE", source)
        .env("METRICS_ADDR", "off")
        .env("PROBE_ADDR", "off")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

const SECRET_KEY: &str = "c2VjcmV0LWtleS1vZi10aGUtcG9saWN5";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_connection_string_or_checkpoint_container_stops_the_writer_at_start() {
    let sim = CosmosSim::builder().start().await.unwrap();
    sim.create_container("telemetry", "positions", "/deviceId")
        .unwrap();

    // The Event Hubs endpoint of the namespace instead of the built-in endpoint's
    // Event Hub-compatible string: no EntityPath.
    let out = writer(
        &sim.endpoint(),
        &format!(
            "Endpoint=sb://{NAMESPACE}/;SharedAccessKeyName=service;SharedAccessKey={SECRET_KEY}"
        ),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("WRITER_SOURCE") && stderr.contains("EntityPath"),
        "{stderr}"
    );
    assert!(!stderr.contains(SECRET_KEY), "{stderr}");

    // A valid string, but no checkpoint container and no permission to create it.
    let out = writer(
        &sim.endpoint(),
        &format!(
            "Endpoint=sb://{NAMESPACE}/;SharedAccessKeyName=service;SharedAccessKey={SECRET_KEY};EntityPath={HUB}"
        ),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("EVENTHUBS_CHECKPOINT_CONTAINER") && stderr.contains("checkpoints"),
        "{stderr}"
    );
    assert!(!stderr.contains(SECRET_KEY), "{stderr}");
}

/// The source on a hub that does not answer (nothing listens on this machine's AMQP
/// port): it fails, or is still retrying when stopped, but it does not panic (rustls
/// panics when two crypto providers are compiled in and none is named).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_hub_fails_the_source_without_panicking() {
    let sim = CosmosSim::builder().start().await.unwrap();
    let client = container(&sim.endpoint(), "telemetry", "x")
        .client()
        .clone();
    let connection = EventHubsConnection::parse(&format!(
        "Endpoint=sb://127.0.0.1/;SharedAccessKeyName=service;SharedAccessKey={SECRET_KEY};EntityPath={HUB}"
    ))
    .unwrap();
    let source = Box::new(EventHubsSource::new(
        connection,
        EventHubsSettings::new(GROUP, StartAt::Earliest),
        CheckpointContainer::Cosmos {
            client: client.clone(),
            database: "telemetry".into(),
            create_if_missing: true,
        },
        Arc::new(Metrics::new()),
    ));
    let (tx, _rx) = cloud_writer::internals::channel(1 << 20, Arc::new(Metrics::new()));
    let control = SourceControl {
        stop: CancellationToken::new(),
        drained: CancellationToken::new(),
    };
    let run = source.run(tx, control.clone());
    match tokio::time::timeout(Duration::from_secs(20), run).await {
        Ok(Err(SourceError::Failed(message))) => {
            assert!(message.contains("WRITER_SOURCE"), "{message}");
            assert!(!message.contains(SECRET_KEY), "{message}");
        }
        Ok(other) => panic!("expected a connection failure, got {other:?}"),
        Err(_elapsed) => {} // still retrying: no panic so far is what this checks
    }
    // The checkpoint container was created on the way.
    assert!(
        CosmosCheckpointStore::open(&client, "telemetry", "checkpoints", false)
            .await
            .is_ok()
    );
}

//! The blob checkpoint store with Entra ID tokens only: the writer, as AKS workload identity
//! runs it, reads a local Event Hubs namespace and writes the local Cosmos endpoint with
//! tokens (both refusing keys) and keeps its checkpoints in Azurite over HTTPS
//! (`CHECKPOINT_BLOB_ACCOUNT_URL`, no key), which checks each bearer token's issuer,
//! audience and times (`--oauth basic`). The checkpoints it leaves, read back by
//! Microsoft's storage client, name the last event of every partition; a writer started
//! again continues after them, reading nothing again.

mod common;

use std::collections::HashMap;
use std::time::Duration;
use test_harness::eventually;

use chrono::Utc;
use cloud_writer::internals::{BlobAuth, BlobCheckpointStore, BlobCheckpoints};
use cloud_writer::{Secret, Settings, Writer};
use common::entra::{WRITER, namespace_and_account, reader, token_settings, workload_identity};
use common::*;
use entra_sim::Ca;
use entra_sim::{App, EntraSim};
use hub_sim::{AuthMethod, Incoming};
use hub_sim::{EventHubsRole, HubSim};
use test_harness::Azurite;

const CONTAINER: &str = "checkpoints";
const DRONES: usize = 40;
const PATIENCE: Duration = Duration::from_secs(60);

/// Routes positions `seqs` of every drone into the hub; the newest of each, as expected.
fn route(
    hub: &HubSim,
    seqs: std::ops::RangeInclusive<u64>,
    expected: &mut HashMap<String, (i64, u64, f64, f64)>,
) {
    let now = Utc::now();
    for d in 0..DRONES {
        let id = device(d);
        for seq in seqs.clone() {
            let ts = now - chrono::Duration::seconds(120 - seq as i64);
            let (lat, lon) = (47.6 + d as f64 * 1e-3, -122.3 + seq as f64 * 1e-4);
            let mut message = Incoming::new(&id, wire(&id, seq, ts, lat, lon));
            message.auth = AuthMethod::Sas;
            hub.partitions().route(message);
            expected.insert(id.clone(), (ts.timestamp_millis(), seq, lat, lon));
        }
    }
}

/// The checkpoint blobs' sequence numbers, by partition, as Microsoft's storage client
/// reads them.
fn checkpoints(azurite: &Azurite) -> HashMap<String, i64> {
    blobs::list(azurite, CONTAINER)
        .into_iter()
        .filter_map(|(name, metadata)| {
            let (_, partition) = name.split_once("/checkpoint/")?;
            Some((
                partition.to_owned(),
                metadata["sequencenumber"].parse().unwrap(),
            ))
        })
        .collect()
}

/// Runs a writer until it has received `count` events and each has its outcome, then stops it.
async fn run_until_received(settings: Settings, count: u64) {
    let writer = Writer::start(settings.resolve().unwrap()).await.unwrap();
    let counts = eventually(
        "every routed position to have a final outcome",
        PATIENCE,
        async || writer.counts(),
        |c| c.received >= count && c.finished() >= count && c.in_flight == 0,
    )
    .await;
    assert_eq!(counts.received, count, "read again or lost: {counts:?}");
    writer.shutdown();
    writer.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_checkpoints_to_blob_storage_with_tokens_only() {
    let issuer = EntraSim::builder().app(
        App::new("storage")
            .app_id_uri("https://storage.azure.com")
            .v1_tokens(),
    );
    let (entra, dir) = workload_identity(issuer).await;
    // Azurite's certificate, from a CA trusted beside the issuer's.
    let ca = Ca::generate().unwrap();
    let (cert, key) = ca.server_pem("azurite").unwrap();
    let trust = dir.path().join("trust.pem");
    std::fs::write(
        &trust,
        format!("{}{}", entra.ca_pem().unwrap(), ca.cert_pem),
    )
    .unwrap();
    for name in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"] {
        // SAFETY: set before anything that reads the environment starts (one test).
        unsafe { std::env::set_var(name, &trust) }
    }
    let azurite = Azurite::start_oauth(&cert, &key).unwrap();
    // The container, made with the account key as an administrator would: the writer's
    // identity may only read and write blobs.
    BlobCheckpointStore::open(&BlobCheckpoints {
        endpoint: azurite.blob_endpoint().parse().unwrap(),
        auth: BlobAuth::SharedKey {
            account: Azurite::ACCOUNT.into(),
            key: Secret::new(Azurite::KEY),
        },
        container: CONTAINER.into(),
    })
    .await
    .unwrap();

    let (hub, sim) = namespace_and_account(&entra, dir.path()).await;
    hub.assign_role(
        entra.object_id(WRITER).unwrap(),
        Some(EventHubsRole::Receiver),
    )
    .unwrap();
    let settings = || Settings {
        checkpoint_blob_account_url: Some(azurite.blob_endpoint().parse().unwrap()),
        checkpoint_blob_container: Some(CONTAINER.into()),
        ..token_settings(&hub, &sim)
    };

    let mut expected = HashMap::new();
    route(&hub, 1..=5, &mut expected);
    run_until_received(settings(), 5 * DRONES as u64).await;
    let first = checkpoints(&azurite);
    assert!(!first.is_empty(), "no checkpoint blob written");
    assert_eq!(
        first.values().map(|seq| seq + 1).sum::<i64>(),
        5 * DRONES as i64,
        "each partition's checkpoint names its last event: {first:?}"
    );

    // Started again, the writer continues after its checkpoints.
    route(&hub, 6..=7, &mut expected);
    run_until_received(settings(), 2 * DRONES as u64).await;
    let second = checkpoints(&azurite);
    assert_eq!(
        second.values().map(|seq| seq + 1).sum::<i64>(),
        7 * DRONES as i64,
        "{second:?}"
    );
    assert_newest(
        &latest_documents(&reader(&sim.endpoint(), "hub")).await,
        &expected,
    );
    hub.shutdown().await;
}

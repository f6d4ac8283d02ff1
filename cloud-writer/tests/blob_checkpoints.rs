//! The blob checkpoint store against Azurite (Microsoft's storage emulator, which checks
//! Shared Key signatures): ownership claims guarded by ETags, checkpoints written and
//! listed back, and a wrong key refused.

mod common;

use azure_messaging_eventhubs::CheckpointStore;
use azure_messaging_eventhubs::models::Ownership;
use cloud_writer::Secret;
use cloud_writer::internals::{BlobAuth, BlobCheckpointStore, BlobCheckpoints, Scope};
use common::checkpoints::{assert_no_ownerships, listed_checkpoints, positions, write_checkpoints};
use test_harness::Azurite;

const NAMESPACE: &str = "Hub.ServiceBus.Windows.Net";
const HUB: &str = "Telemetry";
const GROUP: &str = "$Default";

fn settings(azurite: &Azurite, key: &str) -> BlobCheckpoints {
    BlobCheckpoints {
        endpoint: azurite.blob_endpoint().parse().unwrap(),
        auth: BlobAuth::SharedKey {
            account: Azurite::ACCOUNT.into(),
            key: Secret::new(key),
        },
        container: "checkpoints".into(),
    }
}

fn claim(partition: &str, owner: &str, etag: Option<&azure_core::http::Etag>) -> Ownership {
    let etag = etag.map(ToString::to_string);
    Scope::new(NAMESPACE, HUB, GROUP).ownership(partition.into(), Some(owner.into()), etag, None)
}

#[tokio::test]
async fn claims_are_guarded_by_etags() {
    let azurite = Azurite::start().unwrap();
    // The container does not exist: with a key, the store creates it.
    let store = BlobCheckpointStore::open(&settings(&azurite, Azurite::KEY))
        .await
        .unwrap();

    // First claims: one wins, a second first claim of the same partition loses.
    let first = store
        .claim_ownership(&[claim("0", "a", None)])
        .await
        .unwrap();
    assert_eq!(first.len(), 1, "a first claim of a free partition wins");
    let etag = first[0]
        .etag
        .clone()
        .expect("a claim returns the blob's ETag");
    assert!(first[0].last_modified_time.is_some());
    let lost = store
        .claim_ownership(&[claim("0", "b", None)])
        .await
        .unwrap();
    assert!(lost.is_empty(), "a first claim of an owned partition loses");

    // Renewal with the ETag wins and moves the ETag on; the stale ETag then loses.
    let renewed = store
        .claim_ownership(&[claim("0", "a", Some(&etag)), claim("1", "a", None)])
        .await
        .unwrap();
    assert_eq!(renewed.len(), 2);
    let new_etag = renewed[0].etag.clone().unwrap();
    assert_ne!(new_etag.to_string(), etag.to_string());
    let stale = store
        .claim_ownership(&[claim("0", "b", Some(&etag))])
        .await
        .unwrap();
    assert!(stale.is_empty(), "a claim with a stale ETag loses");

    // The listing shows the owner and the current ETag, which a claim can use.
    let mut listed = store.list_ownerships(NAMESPACE, HUB, GROUP).await.unwrap();
    listed.sort_by(|x, y| x.partition_id.cmp(&y.partition_id));
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].owner_id.as_deref(), Some("a"));
    assert_eq!(
        listed[0].etag.as_ref().map(ToString::to_string),
        Some(new_etag.to_string())
    );
    assert!(listed[0].last_modified_time.is_some());
    let taken = store
        .claim_ownership(&[claim("0", "b", listed[0].etag.as_ref())])
        .await
        .unwrap();
    assert_eq!(taken.len(), 1, "a claim with the listed ETag wins");
    let listed = store.list_ownerships(NAMESPACE, HUB, GROUP).await.unwrap();
    let zero = listed.iter().find(|o| o.partition_id == "0").unwrap();
    assert_eq!(zero.owner_id.as_deref(), Some("b"));
}

#[tokio::test]
async fn checkpoints_are_written_and_listed_back() {
    let azurite = Azurite::start().unwrap();
    let store = BlobCheckpointStore::open(&settings(&azurite, Azurite::KEY))
        .await
        .unwrap();
    let scope = Scope::new(NAMESPACE, HUB, GROUP);
    assert!(
        store
            .list_checkpoints(NAMESPACE, HUB, GROUP)
            .await
            .unwrap()
            .is_empty()
    );
    write_checkpoints(&store, &scope, &[("0", 41), ("1", 7), ("0", 42)]).await;
    // Another consumer group's checkpoint is not listed with this one's.
    store
        .update_checkpoint(Scope::new(NAMESPACE, HUB, "other").checkpoint(
            "0",
            Some(1),
            Some("1".into()),
        ))
        .await
        .unwrap();
    // A handover (a blob of this writer's own, beside the SDKs' layout) is listed as one,
    // and neither as a checkpoint nor as an ownership.
    let claim = "\"0x8DE2B9C3A1F0E55\"";
    store.hand_over(&scope, "1", claim).await.unwrap();
    let handed = store.handed_over(&scope).await.unwrap();
    assert_eq!(handed.len(), 1);
    assert_eq!(handed["1"], claim);
    assert_no_ownerships(&store, NAMESPACE, HUB, GROUP).await;
    let listed = listed_checkpoints(&store, NAMESPACE, HUB, GROUP).await;
    assert_eq!(
        positions(&listed),
        [("0", Some(42), Some("4200")), ("1", Some(7), Some("700"))]
    );
    assert!(
        listed.iter().all(|c| c.consumer_group == GROUP),
        "{listed:?}"
    );
}

#[tokio::test]
async fn a_wrong_key_is_refused() {
    let azurite = Azurite::start().unwrap();
    // A valid base64 key that is not the account's: Azurite checks the signature.
    let wrong =
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==";
    let err = BlobCheckpointStore::open(&settings(&azurite, wrong))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
}

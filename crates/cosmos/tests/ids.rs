//! Document ids in URLs: every id stays inside its own path segment. Ids with `%`, encoded
//! dots and spaces round-trip create, read and delete against the local endpoint
//! (`cosmos-sim`, which decodes each segment and checks the signature over the unencoded link,
//! as the service does); ids with `/`, `?` and `#` (which the service refuses to store) name no
//! other document when read or deleted; `.` and `..` are refused before anything is sent, so
//! `/docs/..` never reaches the container.

use std::time::Duration;

use cosmos::{
    ContainerClient, ContainerSetup, CosmosClient, CosmosConfig, CosmosError, Credential, MasterKey,
};
use cosmos_sim::CosmosSim;
use serde_json::json;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

async fn setup(sim: &CosmosSim) -> ContainerClient {
    let config = CosmosConfig::new(
        sim.endpoint().parse().unwrap(),
        Credential::MasterKey(MasterKey::from_base64(sim.key()).unwrap()),
    );
    let container = CosmosClient::new(config)
        .unwrap()
        .container("telemetry", "fences");
    container
        .create_if_missing(&ContainerSetup::new("/id"))
        .await
        .unwrap();
    container
}

#[tokio::test]
async fn odd_ids_round_trip_in_their_own_segment() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().start().await.unwrap();
        let container = setup(&sim).await;
        let write = |id: &str| serde_json::to_vec(&json!({"id": id, "n": 1})).unwrap();
        let ids = [
            "100%",
            "%2e%2e",
            "%2F",
            "%3F",
            "with space",
            " a ",
            "..a",
            "a..",
            "...",
            "a+b",
            "é ü",
        ];
        for id in ids {
            let created = container.create(id, &write(id)).await.unwrap();
            assert_eq!(created.status, 201, "{id:?}");
        }
        for id in ids {
            let read = container.read(id, id).await.unwrap();
            let body: serde_json::Value = read.expect(id).json().unwrap();
            assert_eq!(body["id"], id, "{id:?} read back another document");
        }
        for id in ids {
            let deleted = container.delete(id, id, None).await.unwrap();
            assert_eq!(deleted.status, 204, "{id:?}");
            assert!(container.read(id, id).await.unwrap().is_none(), "{id:?}");
        }

        // `/ ? #` the service refuses in an id; asked for, they stay in the id's segment: not
        // the document `a` (which a query string, a fragment or a sub-path would name), and
        // not the container.
        container.create("a", &write("a")).await.unwrap();
        for id in ["a/b", "a?b", "a#b", "a?", "a#"] {
            assert!(container.read(id, id).await.unwrap().is_none(), "{id:?}");
            let deleted = container.delete(id, id, None).await;
            assert!(
                matches!(&deleted, Err(e) if e.is_not_found() || e.status() == Some(400)),
                "{id:?}: {deleted:?}"
            );
            let created = container.create(id, &write(id)).await;
            assert_eq!(created.err().and_then(|e| e.status()), Some(400), "{id:?}");
        }
        let a: serde_json::Value = container
            .read("a", "a")
            .await
            .unwrap()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(a["id"], "a");
        // Only documents went: the container is still there.
        container.properties().await.unwrap();
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn dot_ids_are_refused_before_anything_is_sent() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().start().await.unwrap();
        let container = setup(&sim).await;
        let before = sim.stats().requests;
        for id in [".", ".."] {
            let refused = |r: Result<_, CosmosError>| matches!(r, Err(CosmosError::InvalidName(_)));
            assert!(refused(container.read(id, id).await.map(|_| ())), "{id:?}");
            assert!(
                refused(container.delete(id, id, None).await.map(|_| ())),
                "{id:?}"
            );
            let doc = serde_json::to_vec(&json!({"id": id})).unwrap();
            assert!(
                refused(container.replace(id, id, &doc, None).await.map(|_| ())),
                "{id:?}"
            );
        }
        // A container named `..` would fold onto the database: refused the same way.
        let beside = container.client().container("telemetry", "..");
        assert!(matches!(
            beside.properties().await,
            Err(CosmosError::InvalidName(_))
        ));
        assert_eq!(sim.stats().requests, before, "the endpoint saw a request");
        container.properties().await.unwrap();
    })
    .await
    .expect("test timed out");
}

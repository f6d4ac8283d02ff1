//! The client against `@vercel/cosmosdb-server`, an independent implementation of the REST
//! API: container setup, point operations with preconditions, ids with `%`, encoded dots and
//! spaces each in its own path segment, a bulk of 10,000 documents, a spatial query, and a
//! bulk under the undefined partition key. (That server ignores
//! signatures, has one range whose id is a JSON number, does not support Patch inside
//! batches, and refuses the undefined key in point operations.)

mod common;

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use common::positions_container;
use cosmos::{
    BulkConfig, BulkOperation, ContainerClient, ContainerSetup, CosmosClient, CosmosConfig,
    Credential, FinalError, MasterKey, OperationType, PartitionKey, PatchOperation, PatchRequest,
    QueryParameter, QueryRequest, QueryScope,
};
use cosmos_wire::auth::EMULATOR_KEY;
use serde_json::{Value, json};
use test_harness::CosmosDbServer;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

fn client(server: &CosmosDbServer) -> CosmosClient {
    let mut config = CosmosConfig::new(
        server.endpoint().parse().unwrap(),
        Credential::MasterKey(MasterKey::from_base64(EMULATOR_KEY).unwrap()),
    );
    config.accept_invalid_certs = true;
    config.request_timeout = Duration::from_secs(30);
    CosmosClient::new(config).unwrap()
}

async fn container(server: &CosmosDbServer, name: &str) -> ContainerClient {
    positions_container(&client(server), name).await
}

fn position(device: &str, id: &str, lon: f64, lat: f64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": id,
        "deviceId": device,
        "location": {"type": "Point", "coordinates": [lon, lat]},
    }))
    .unwrap()
}

#[tokio::test]
async fn sets_up_database_and_container_idempotently() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let server = CosmosDbServer::start().unwrap();
        let client = client(&server);
        assert!(
            client
                .create_database_if_missing("telemetry")
                .await
                .unwrap()
        );
        assert!(
            !client
                .create_database_if_missing("telemetry")
                .await
                .unwrap()
        );

        let container = client.container("telemetry", "positions");
        let missing = container.properties().await.unwrap_err();
        assert!(missing.is_not_found(), "{missing}");

        let setup = ContainerSetup {
            default_ttl: Some(3600),
            throughput: Some(400),
            location_path: Some("/location".into()),
            ..ContainerSetup::new("/deviceId")
        };
        let created = container.create_if_missing(&setup).await.unwrap();
        assert_eq!(created.partition_key.paths, vec!["/deviceId".to_string()]);
        // The second call finds the container and returns its definition.
        let again = container.create_if_missing(&setup).await.unwrap();
        assert_eq!(again.partition_key.paths, vec!["/deviceId".to_string()]);
        assert_eq!(container.properties().await.unwrap().id, "positions");

        // A container whose database is missing: the database is created with it.
        let fresh = client.container("created-with-its-container", "positions");
        fresh
            .create_if_missing(&ContainerSetup::new("/deviceId"))
            .await
            .unwrap();
        assert_eq!(fresh.properties().await.unwrap().id, "positions");

        // One range, whose id this server sends as a JSON number.
        let map = container.range_map().await.unwrap();
        assert_eq!(map.len(), 1);
        assert_eq!(map.ranges()[0].id, "0");
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn point_operations_with_preconditions() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let server = CosmosDbServer::start_https().unwrap();
        let c = container(&server, "points").await;

        let first = c
            .upsert("drone-1", &position("drone-1", "p1", 1.5, 2.5))
            .await
            .unwrap();
        assert!(matches!(first.status, 200 | 201));
        let etag = first.etag.clone().expect("an upsert returns the ETag");

        let read = c
            .read("drone-1", "p1")
            .await
            .unwrap()
            .expect("document exists");
        assert_eq!(
            read.json::<Value>().unwrap()["location"]["coordinates"],
            json!([1.5, 2.5])
        );
        // (A read of a missing document makes this server fail with 500; the local endpoint
        // tests cover the 404.)

        let created = c
            .create("drone-1", &position("drone-1", "p1", 0.0, 0.0))
            .await
            .unwrap_err();
        assert!(created.is_conflict(), "{created}");

        let replaced = c
            .replace(
                "drone-1",
                "p1",
                &position("drone-1", "p1", 3.5, 4.5),
                Some(&etag),
            )
            .await
            .unwrap();
        let stale = c
            .replace(
                "drone-1",
                "p1",
                &position("drone-1", "p1", 5.0, 6.0),
                Some(&etag),
            )
            .await
            .unwrap_err();
        assert!(stale.is_precondition_failed(), "{stale}");
        assert_eq!(stale.status(), Some(412));

        let patch = PatchRequest {
            operations: vec![PatchOperation {
                op: "set".into(),
                path: "/seq".into(),
                value: Some(json!(7)),
            }],
            condition: None,
        };
        let patched = c
            .patch("drone-1", "p1", &patch, replaced.etag.as_deref())
            .await
            .unwrap();
        assert_eq!(patched.status, 200);
        let doc: Value = c
            .read("drone-1", "p1")
            .await
            .unwrap()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(doc["seq"], 7);
        assert_eq!(doc["location"]["coordinates"], json!([3.5, 4.5]));

        let missing = c
            .patch("drone-1", "absent", &patch, None)
            .await
            .unwrap_err();
        assert!(missing.is_not_found(), "{missing}");

        c.delete("drone-1", "p1", None).await.unwrap();
        assert!(
            c.delete("drone-1", "p1", None)
                .await
                .unwrap_err()
                .is_not_found()
        );
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn bulk_of_ten_thousand_documents_all_arrive() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let server = CosmosDbServer::start().unwrap();
        let c = container(&server, "bulk").await;
        let (writer, mut outcomes) = c.bulk_writer::<usize>(BulkConfig::default());
        let total = 10_000;
        let feeder = tokio::spawn(async move {
            for i in 0..total {
                let device = format!("drone-{}", i % 97);
                let id = format!("pos-{i}");
                let op = BulkOperation {
                    kind: OperationType::Upsert,
                    partition_key: device.clone().into(),
                    id: None,
                    body: Bytes::from(position(&device, &id, 0.001 * i as f64, 0.0)),
                    if_match: None,
                    context: i,
                };
                writer.submit(op).await.unwrap();
            }
            writer.close().await;
        });
        let mut seen = HashSet::new();
        while let Some(outcome) = outcomes.next().await {
            assert!(outcome.is_success(), "{outcome:?}");
            assert_eq!(outcome.range_id, "0");
            assert!(
                seen.insert(outcome.context),
                "outcome twice for {}",
                outcome.context
            );
        }
        feeder.await.unwrap();
        assert_eq!(seen.len(), total);

        let ids = c
            .query(
                &QueryRequest {
                    query: "SELECT c.id FROM c".into(),
                    parameters: vec![],
                },
                QueryScope::AllRanges,
            )
            .await
            .unwrap();
        let ids: HashSet<String> = ids
            .documents
            .iter()
            .map(|d| d["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids.len(), total);
        assert!((0..total).all(|i| ids.contains(&format!("pos-{i}"))));
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn bulk_reports_conflicts_and_unsupported_patch_as_final() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let server = CosmosDbServer::start().unwrap();
        let c = container(&server, "final").await;
        c.upsert("drone-1", &position("drone-1", "taken", 0.0, 0.0))
            .await
            .unwrap();

        let (writer, mut outcomes) = c.bulk_writer::<&'static str>(BulkConfig::default());
        let op = |kind, id: &str, body: Vec<u8>, context| BulkOperation {
            kind,
            partition_key: "drone-1".into(),
            id: Some(id.to_string()),
            body: Bytes::from(body),
            if_match: None,
            context,
        };
        writer
            .submit(op(
                OperationType::Create,
                "taken",
                position("drone-1", "taken", 1.0, 1.0),
                "conflict",
            ))
            .await
            .unwrap();
        writer
            .submit(op(
                OperationType::Replace,
                "absent",
                position("drone-1", "absent", 1.0, 1.0),
                "missing",
            ))
            .await
            .unwrap();
        writer
            .submit(op(
                OperationType::Delete,
                "absent",
                Vec::new(),
                "delete-missing",
            ))
            .await
            .unwrap();
        writer
            .submit(op(
                OperationType::Patch,
                "taken",
                b"not json".to_vec(),
                "malformed",
            ))
            .await
            .unwrap();
        writer.close().await;
        let mut results = std::collections::HashMap::new();
        while let Some(outcome) = outcomes.next().await {
            results.insert(outcome.context, outcome);
        }
        assert_eq!(results.len(), 4);
        // All four travel in one batch, which the server refuses as a whole for the malformed
        // body: that one fails alone and the others are sent once more, where 409 and 404 are final.
        let conflict = &results["conflict"];
        assert_eq!((conflict.status, conflict.attempts), (409, 2));
        assert_eq!(conflict.error, Some(FinalError::Rejected));
        assert_eq!(results["missing"].status, 404);
        assert_eq!(
            results["missing"].attempts, 2,
            "a 404 is final, not retried"
        );
        assert_eq!(results["delete-missing"].status, 404);
        assert!(matches!(
            results["malformed"].error,
            Some(FinalError::Invalid(_))
        ));

        // This server rejects Patch inside a batch as a whole (400): final for every operation.
        let (writer, mut outcomes) = c.bulk_writer::<&'static str>(BulkConfig::default());
        let patch =
            serde_json::to_vec(&json!({"operations":[{"op":"set","path":"/seq","value":1}]}))
                .unwrap();
        writer
            .submit(op(OperationType::Patch, "taken", patch, "patch"))
            .await
            .unwrap();
        writer.close().await;
        let outcome = outcomes.next().await.unwrap();
        assert_eq!((outcome.status, outcome.attempts), (400, 1));
        assert!(outcomes.next().await.is_none());
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn spatial_query_finds_documents_within_a_kilometre() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let server = CosmosDbServer::start().unwrap();
        let c = container(&server, "spatial").await;
        // Redmond, a point about 500 m east, and Seattle (about 20 km away).
        c.upsert("drone-1", &position("drone-1", "near", -122.12, 47.66))
            .await
            .unwrap();
        c.upsert("drone-2", &position("drone-2", "close", -122.1134, 47.66))
            .await
            .unwrap();
        c.upsert("drone-3", &position("drone-3", "far", -122.33, 47.61))
            .await
            .unwrap();

        let query = QueryRequest {
            query: "SELECT c.id FROM c WHERE ST_DISTANCE(c.location, @here) < 1000".into(),
            parameters: vec![QueryParameter {
                name: "@here".into(),
                value: json!({"type": "Point", "coordinates": [-122.12, 47.66]}),
            }],
        };
        let found = c.query(&query, QueryScope::AllRanges).await.unwrap();
        let mut ids: Vec<&str> = found
            .documents
            .iter()
            .map(|d| d["id"].as_str().unwrap())
            .collect();
        ids.sort();
        assert_eq!(ids, ["close", "near"]);
        assert!(found.calls >= 1);
        assert!(found.request_charge > 0.0);

        // This server does not scope queries by the partition key header, so say it in SQL too.
        let in_partition = QueryRequest {
            query: "SELECT c.id FROM c WHERE c.deviceId = @device AND ST_DISTANCE(c.location, @here) < 1000".into(),
            parameters: vec![
                query.parameters[0].clone(),
                QueryParameter { name: "@device".into(), value: json!("drone-2") },
            ],
        };
        let one = c
            .query(&in_partition, QueryScope::Partition("drone-2".into()))
            .await
            .unwrap();
        assert_eq!(one.documents.len(), 1);
        assert_eq!(one.documents[0]["id"], "close");
    })
    .await
    .expect("the test finished within its time limit");
}

/// Documents without the container's key, written in batches under the undefined key `[{}]`.
/// That server keeps no logical partitions (it files such a document under its id and has one
/// range) and refuses `[{}]` in a point read's header (400, "fewer components than defined"),
/// so this checks only that its batches accept the wire form; routing to one range and point
/// operations are checked against the local endpoint.
#[tokio::test]
async fn undefined_key_documents_are_written_in_batches_with_the_empty_object() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let server = CosmosDbServer::start().unwrap();
        let c = container(&server, "undefined").await;
        let (writer, mut outcomes) = c.bulk_writer::<usize>(BulkConfig::default());
        let total = 50;
        let feeder = tokio::spawn(async move {
            for i in 0..total {
                let op = BulkOperation {
                    kind: OperationType::Upsert,
                    partition_key: PartitionKey::Undefined,
                    id: None,
                    body: Bytes::from(
                        serde_json::to_vec(&json!({"id": format!("u-{i}"), "seq": i})).unwrap(),
                    ),
                    if_match: None,
                    context: i,
                };
                writer.submit(op).await.unwrap();
            }
            writer.close().await;
        });
        let mut written = 0;
        while let Some(outcome) = outcomes.next().await {
            assert!(outcome.is_success(), "{outcome:?}");
            written += 1;
        }
        feeder.await.unwrap();
        assert_eq!(written, total);
        let stored = c
            .query(
                &QueryRequest {
                    query: "SELECT * FROM c WHERE c.id = @id".into(),
                    parameters: vec![QueryParameter {
                        name: "@id".into(),
                        value: json!("u-7"),
                    }],
                },
                QueryScope::AllRanges,
            )
            .await
            .unwrap();
        assert_eq!(stored.documents.len(), 1);
        assert_eq!(stored.documents[0]["seq"], 7);
        assert!(stored.documents[0].get("deviceId").is_none());
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn odd_ids_round_trip_each_in_its_own_segment() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let server = CosmosDbServer::start().unwrap();
        let c = container(&server, "odd-ids").await;
        let ids = ["100%", "%2e%2e", "%2F", "with space", "a+b", "...", "é ü"];
        for id in ids {
            let written = c.create("d", &position("d", id, 1.0, 2.0)).await;
            assert_eq!(written.map(|w| w.status).ok(), Some(201), "{id:?}");
        }
        for id in ids {
            let read = c.read("d", id).await.unwrap().expect(id);
            assert_eq!(read.json::<Value>().unwrap()["id"], id, "{id:?}");
        }
        for id in ids {
            c.delete("d", id, None).await.unwrap();
            let again = c.delete("d", id, None).await.unwrap_err();
            assert!(again.is_not_found(), "{id:?}: {again}");
        }
    })
    .await
    .expect("the test finished within its time limit");
}

//! The client against the local endpoint (`cosmos-sim`, in process): signatures, point
//! operations and conditional patch, single- and cross-partition queries, the undefined
//! partition key, whole-request refusals and the throttle wait. The bulk writer is in
//! `sim_bulk.rs`.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use cosmos::{
    BulkConfig, BulkOperation, CosmosError, FinalError, MasterKey, OperationType, PartitionKey,
    PatchOperation, PatchRequest, QueryOptions, QueryRequest, QueryScope,
};
use cosmos_sim::CosmosSim;
use serde_json::json;

#[tokio::test]
async fn signed_requests_pass_and_a_wrong_key_gets_a_typed_401() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().start().await.unwrap();
        let container = setup(&sim).await;
        assert_eq!(container.range_map().await.unwrap().len(), 4);

        let other_key =
            "dsZQi3KtZmCv1ljt3VNWNm7sQUF1y5rJfC6kv5JiwvW0EndXdDku/dkKBp8/ufDToSxLzR4y+O/0H/t4bQtVNw==";
        let wrong = client_with_key(&sim, other_key).container(DB, COLL);
        let err = wrong.properties().await.unwrap_err();
        assert_eq!(err.status(), Some(401), "{err}");
        assert!(matches!(&err, CosmosError::Service(e) if e.activity_id.is_some()) || err.to_string().contains("401"));
        // Neither the key nor its bytes show in Debug output.
        let debug = format!("{:?}", client_with_key(&sim, other_key));
        assert!(!debug.contains("dsZQi3"), "{debug}");
        assert!(debug.contains("redacted"));
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn conditional_patch_gives_written_superseded_and_missing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().start().await.unwrap();
        let c = setup(&sim).await;
        assert!(c.read("drone-1", "drone-1").await.unwrap().is_none());
        c.create("drone-1", &doc("drone-1", "drone-1", 1_000, 1))
            .await
            .unwrap();

        let newer = |time: u64, seq: u64| PatchRequest {
            operations: vec![
                PatchOperation {
                    op: "set".into(),
                    path: "/deviceTimeMs".into(),
                    value: Some(json!(time)),
                },
                PatchOperation {
                    op: "set".into(),
                    path: "/seq".into(),
                    value: Some(json!(seq)),
                },
            ],
            condition: Some(format!(
                "from c where c.deviceTimeMs < {time} or (c.deviceTimeMs = {time} and c.seq < {seq})"
            )),
        };
        let written = c
            .patch("drone-1", "drone-1", &newer(2_000, 2), None)
            .await
            .unwrap();
        assert_eq!(written.status, 200);
        assert!(written.request_charge > 0.0);
        let stale = c
            .patch("drone-1", "drone-1", &newer(1_500, 9), None)
            .await
            .unwrap_err();
        assert!(stale.is_precondition_failed(), "{stale}");
        let missing = c
            .patch("drone-2", "drone-2", &newer(1, 1), None)
            .await
            .unwrap_err();
        assert!(missing.is_not_found(), "{missing}");

        let read = c.read("drone-1", "drone-1").await.unwrap().unwrap();
        let value: serde_json::Value = read.json().unwrap();
        assert_eq!(
            (value["deviceTimeMs"].as_u64(), value["seq"].as_u64()),
            (Some(2_000), Some(2))
        );

        // The same through the bulk writer: each outcome is final and carries what the caller needs.
        let (writer, mut outcomes) = c.bulk_writer::<&'static str>(BulkConfig::default());
        let patch_op = |device: &str, patch: PatchRequest, context| BulkOperation {
            kind: OperationType::Patch,
            partition_key: device.into(),
            id: Some(device.to_string()),
            body: Bytes::from(serde_json::to_vec(&patch).unwrap()),
            if_match: None,
            context,
        };
        writer
            .submit(patch_op("drone-1", newer(3_000, 3), "written"))
            .await
            .unwrap();
        writer
            .submit(patch_op("drone-1", newer(2_500, 1), "superseded"))
            .await
            .unwrap();
        writer
            .submit(patch_op("drone-9", newer(3_000, 3), "missing"))
            .await
            .unwrap();
        writer.close().await;
        let mut seen = std::collections::HashMap::new();
        while let Some(o) = outcomes.next().await {
            seen.insert(o.context, o);
        }
        assert_eq!(seen["written"].status, 200);
        assert!(seen["written"].etag.is_some());
        assert!(seen["written"].request_charge > 0.0);
        assert_eq!(seen["superseded"].status, 412);
        assert_eq!(seen["superseded"].error, Some(FinalError::Rejected));
        assert_eq!(seen["missing"].status, 404);
        assert!(seen.values().all(|o| o.attempts == 1));
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn queries_on_one_partition_and_fanned_out_to_all_ranges() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
        let c = setup(&sim).await;
        for i in 0..40u64 {
            let device = format!("drone-{i}");
            c.upsert(&device, &doc(&device, &device, 1_000, i))
                .await
                .unwrap();
        }
        let all = QueryRequest {
            query: "SELECT c.id FROM c".into(),
            parameters: vec![],
        };
        let fanned = c.query(&all, QueryScope::AllRanges).await.unwrap();
        assert_eq!(fanned.documents.len(), 40);
        assert!(
            fanned.calls >= 4,
            "one call per range at least: {}",
            fanned.calls
        );
        assert!(fanned.request_charge > 0.0);

        let one = c
            .query(&all, QueryScope::Partition("drone-7".into()))
            .await
            .unwrap();
        assert_eq!(one.documents, vec![json!({"id": "drone-7"})]);
        assert_eq!(one.calls, 1);

        // After a split the fan-out finds the new ranges.
        let first = c.range_map().await.unwrap().ranges()[0].id.clone();
        sim.split_range(DB, COLL, &first).unwrap();
        let again = c.query(&all, QueryScope::AllRanges).await.unwrap();
        assert_eq!(again.documents.len(), 40);
        assert_eq!(c.range_map().await.unwrap().len(), 5);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undefined_keys_land_in_one_range_and_are_read_back_with_the_empty_object() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const TOTAL: u64 = 400;
        let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
        let c = setup(&sim).await;
        let expected = c
            .range_map()
            .await
            .unwrap()
            .range_of_key(&PartitionKey::Undefined)
            .clone();
        // Documents without /deviceId, as a writer that never puts the container's key in.
        let body = |i: u64| {
            Bytes::from(serde_json::to_vec(&json!({"id": format!("u-{i}"), "seq": i})).unwrap())
        };
        let (writer, mut outcomes) = c.bulk_writer::<u64>(BulkConfig::default());
        let feeder = {
            let writer = writer.clone();
            tokio::spawn(async move {
                for i in 0..TOTAL {
                    let op = BulkOperation {
                        kind: OperationType::Upsert,
                        partition_key: PartitionKey::Undefined,
                        id: None,
                        body: body(i),
                        if_match: None,
                        context: i,
                    };
                    writer.submit(op).await.unwrap();
                }
            })
        };
        for _ in 0..TOTAL {
            let outcome = outcomes.next().await.expect("an outcome per operation");
            assert!(outcome.is_success(), "{outcome:?}");
            assert_eq!(outcome.range_id, expected.id);
        }
        feeder.await.unwrap();
        // Closing waits for every batch to be accounted for.
        let handle = writer.clone();
        writer.close().await;
        let stats = handle.stats();
        assert_eq!(
            stats
                .ranges
                .iter()
                .filter(|(_, r)| r.batches > 0)
                .map(|(id, r)| (id, r.operations))
                .collect::<Vec<_>>(),
            vec![(&expected.id, TOTAL)],
            "one range took every batch"
        );

        // The server agrees: one physical partition holds them all.
        let sim_stats = sim.stats();
        let partitions = &sim_stats.container(DB, COLL).unwrap().partitions;
        let held: Vec<(&str, usize)> = partitions
            .iter()
            .filter(|p| p.live && p.documents > 0)
            .map(|p| (p.id.as_str(), p.documents))
            .collect();
        assert_eq!(held, vec![(expected.id.as_str(), TOTAL as usize)]);

        // Point operations address the undefined key as [{}]; a string key is another partition.
        let read = c.read(PartitionKey::Undefined, "u-7").await.unwrap();
        let doc: serde_json::Value = read.expect("found under the undefined key").json().unwrap();
        assert_eq!(doc["seq"], 7);
        assert!(doc.get("deviceId").is_none());
        assert!(c.read("", "u-7").await.unwrap().is_none());
        assert!(c.read("undefined", "u-7").await.unwrap().is_none());
        c.delete(PartitionKey::Undefined, "u-7", None)
            .await
            .unwrap();
        assert!(
            c.read(PartitionKey::Undefined, "u-7")
                .await
                .unwrap()
                .is_none()
        );
        let written = c
            .upsert(
                PartitionKey::Undefined,
                &serde_json::to_vec(&json!({"id": "u-7", "seq": 70})).unwrap(),
            )
            .await
            .unwrap();
        assert!(matches!(written.status, 200 | 201), "{written:?}");
        let doc: serde_json::Value = c
            .read(PartitionKey::Undefined, "u-7")
            .await
            .unwrap()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(doc["seq"], 70);
    })
    .await
    .expect("the test finished within its time limit");
}

/// A 404 that answers the batch request (the container is gone) is told apart from a 404 of
/// one operation (the document is missing); a client signs with a rotated key once told.
#[tokio::test]
async fn whole_request_refusals_are_marked_and_a_rotated_key_is_taken() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().start().await.unwrap();
        let container = setup(&sim).await;
        let op = |kind, context| BulkOperation {
            kind,
            partition_key: "d1".into(),
            id: Some("d1".into()),
            body: Bytes::from(doc("d1", "d1", 1_000, 1)),
            if_match: None,
            context,
        };
        let (writer, mut outcomes) = container.bulk_writer::<u64>(BulkConfig::default());
        writer.submit(op(OperationType::Replace, 1)).await.unwrap();
        let missing_doc = outcomes.next().await.unwrap();
        assert_eq!(
            (missing_doc.status, missing_doc.whole_request),
            (404, false)
        );

        sim.delete_container(DB, COLL).unwrap();
        writer.submit(op(OperationType::Create, 2)).await.unwrap();
        let missing_container = outcomes.next().await.unwrap();
        assert_eq!(
            (missing_container.status, missing_container.whole_request),
            (404, true)
        );
        assert_eq!(missing_container.error, Some(FinalError::Rejected));

        sim.create_container(DB, COLL, "/deviceId").unwrap();
        const ROTATED: &str = "dGhlIHJvdGF0ZWQga2V5IG9mIHRoZSBhY2NvdW50";
        sim.rotate_key(ROTATED).unwrap();
        writer.submit(op(OperationType::Create, 3)).await.unwrap();
        let refused = outcomes.next().await.unwrap();
        assert_eq!((refused.status, refused.whole_request), (401, true));
        container
            .client()
            .set_master_key(MasterKey::from_base64(ROTATED).unwrap());
        writer.submit(op(OperationType::Create, 4)).await.unwrap();
        let written = outcomes.next().await.unwrap();
        assert_eq!((written.status, written.context), (201, 4));
    })
    .await
    .expect("the test finished within its time limit");
}

/// A client with a throttle wait gives a throttled query up with its 429 instead of retrying
/// it for the retry policy's minute; without one the same query waits and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttle_wait_answers_the_429_instead_of_retrying() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder()
            .partitions(1)
            .ru_per_sec(4.0)
            .start()
            .await
            .unwrap();
        let c = setup(&sim).await;
        let all = QueryRequest {
            query: "SELECT * FROM c".into(),
            parameters: Vec::new(),
        };
        // 4 RU/s and a query of at least 2.3 RU: the second query at once is throttled.
        c.query(&all, QueryScope::AllRanges).await.unwrap();
        let impatient = c.with_throttle_wait(Duration::ZERO);
        let failure = impatient
            .query_counted(&all, &QueryScope::AllRanges, &QueryOptions::default())
            .await
            .unwrap_err();
        assert_eq!(failure.source.status(), Some(429), "{}", failure.source);
        assert_eq!((failure.cost.calls, failure.cost.throttled), (1, 1));
        // Without the wait the client retries after the retry-after and is answered.
        let patient = c
            .query_counted(&all, &QueryScope::AllRanges, &QueryOptions::default())
            .await
            .unwrap();
        assert!(patient.cost.throttled >= 1, "{:?}", patient.cost);
    })
    .await
    .expect("the test finished within its time limit");
}

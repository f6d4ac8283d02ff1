//! The client against the local endpoint (`cosmos-sim`, in process): signatures, point
//! operations and conditional patch, single- and cross-partition queries, the bulk writer
//! under throttling, a split and injected 503s and timeouts, and the undefined partition key.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use cosmos::{
    BulkConfig, BulkOperation, ContainerClient, ContainerSetup, CosmosClient, CosmosConfig,
    CosmosError, Credential, FinalError, MasterKey, OperationType, PartitionKey, PatchOperation,
    PatchRequest, QueryOptions, QueryRequest, QueryScope,
};
use cosmos_sim::CosmosSim;
use serde_json::json;
use test_harness::eventually;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(300);

const DB: &str = "telemetry";
const COLL: &str = "positions";

fn client_with_key(sim: &CosmosSim, key: &str) -> CosmosClient {
    let config = CosmosConfig::new(
        sim.endpoint().parse().unwrap(),
        Credential::MasterKey(MasterKey::from_base64(key).unwrap()),
    );
    CosmosClient::new(config).unwrap()
}

async fn setup(sim: &CosmosSim) -> ContainerClient {
    let client = client_with_key(sim, sim.key());
    let container = client.container(DB, COLL);
    container
        .create_if_missing(&ContainerSetup {
            location_path: Some("/location".into()),
            ..ContainerSetup::new("/deviceId")
        })
        .await
        .unwrap();
    container
}

fn doc(device: &str, id: &str, time_ms: u64, seq: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": id,
        "deviceId": device,
        "deviceTimeMs": time_ms,
        "seq": seq,
        "location": {"type": "Point", "coordinates": [8.5 + seq as f64 * 1e-4, 47.3]},
        "altitudeM": 420.5,
        "speedMps": 12.25,
    }))
    .unwrap()
}

fn upsert(device: String, id: String, context: u64) -> BulkOperation<u64> {
    BulkOperation {
        kind: OperationType::Upsert,
        body: Bytes::from(doc(&device, &id, 1_000, context)),
        partition_key: device.into(),
        id: None,
        if_match: None,
        context,
    }
}

/// Documents stored in the container's live partitions.
fn stored(sim: &CosmosSim) -> usize {
    let stats = sim.stats();
    let container = stats.container(DB, COLL).expect("container exists");
    container
        .partitions
        .iter()
        .filter(|p| p.live)
        .map(|p| p.documents)
        .sum()
}

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

/// Feeds `total` upserts with uniform keys from one task while the test reads outcomes;
/// calls `each` with the number of outcomes read after each one.
async fn run_bulk(
    c: &ContainerClient,
    config: BulkConfig,
    total: u64,
    mut each: impl FnMut(u64),
) -> cosmos::BulkStats {
    let (writer, mut outcomes) = c.bulk_writer::<u64>(config);
    let feeder = {
        let writer = writer.clone();
        tokio::spawn(async move {
            for i in 0..total {
                writer
                    .submit(upsert(
                        format!("drone-{}", i % 5_000),
                        format!("pos-{i}"),
                        i,
                    ))
                    .await
                    .unwrap();
            }
        })
    };
    let mut seen = HashSet::new();
    while (seen.len() as u64) < total {
        let outcome = outcomes
            .next()
            .await
            .expect("an outcome for every operation");
        assert!(outcome.is_success(), "{outcome:?}");
        assert!(
            seen.insert(outcome.context),
            "two outcomes for {}",
            outcome.context
        );
        each(seen.len() as u64);
    }
    feeder.await.unwrap();
    // Closing waits for every batch to be accounted for.
    let handle = writer.clone();
    writer.close().await;
    let stats = handle.stats();
    assert!(
        outcomes.next().await.is_none(),
        "no outcome beyond one per operation"
    );
    stats
}

/// RU charged so far in the test container.
fn ru_used(sim: &CosmosSim) -> f64 {
    let stats = sim.stats();
    let container = stats.container(DB, COLL).expect("container exists");
    container.partitions.iter().map(|p| p.ru_total).sum()
}

/// The test container's RU per second, all partitions together, from the endpoint's heat map.
fn ru_per_second(sim: &CosmosSim) -> BTreeMap<u64, f64> {
    let stats = sim.stats();
    let container = stats.container(DB, COLL).expect("container exists");
    let mut seconds = BTreeMap::new();
    for (second, ru) in container.partitions.iter().flat_map(|p| &p.ru_per_second) {
        *seconds.entry(*second).or_default() += ru;
    }
    seconds
}

/// The RU of each whole second of `seconds` after the second `after`: the last second is left
/// out (it may not be over) and a second without a row served nothing.
fn whole_seconds_after(seconds: &BTreeMap<u64, f64>, after: u64) -> Vec<f64> {
    let last = seconds.keys().next_back().copied().unwrap_or(after);
    (after + 1..last)
        .map(|second| seconds.get(&second).copied().unwrap_or(0.0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_bulk_writes_everything_and_uses_the_budget() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const TOTAL: u64 = 100_000;
        let sim = CosmosSim::unthrottled()
            .await
            .unwrap();
        let c = setup(&sim).await;
        // The first documents measure the offered rate (it varies a lot with the build and the
        // machine's load) over the first whole second of the endpoint's heat map, and the RU a
        // document costs. The budget is then 45% of the offered rate, so that the rest is
        // certainly throttled, and at most an eighth of what the documents not yet written
        // cost, so that on a fast machine the rest still takes about 8 s; the run is judged on the
        // whole seconds after the one the budget changed in. The probe watches the heat map
        // beside the writer, not between outcomes: on a busy machine the test reads outcomes
        // many thousands behind the writer.
        let probe = async {
            let first_whole_second = || {
                let seconds = ru_per_second(&sim);
                let first = *seconds.keys().next()?;
                let whole = whole_seconds_after(&seconds, first);
                (!whole.is_empty()).then(|| whole.iter().sum::<f64>() / whole.len() as f64)
            };
            let offered = eventually(
                "a whole second charged",
                Duration::from_secs(120),
                async || first_whole_second(),
                Option::is_some,
            )
            .await
            .expect("a whole second");
            let written = stored(&sim);
            let per_document = ru_used(&sim) / written.max(1) as f64;
            let rest = per_document * (TOTAL as usize).saturating_sub(written) as f64;
            let ru_per_sec = (0.45 * offered).min(rest / 8.0).max(1.0).round();
            sim.set_ru_per_sec(DB, COLL, ru_per_sec).unwrap();
            // The latest second charged may have ended before the change: skip one more.
            let changed = ru_per_second(&sim).keys().next_back().copied().unwrap() + 1;
            (ru_per_sec, changed)
        };
        let (stats, (ru_per_sec, changed)) = tokio::join!(
            run_bulk(&c, BulkConfig::default(), TOTAL, |_| {}),
            probe
        );

        assert_eq!(stored(&sim), TOTAL as usize, "every document is stored");
        let sim_stats = sim.stats();
        let used = ru_used(&sim);
        let throttled = whole_seconds_after(&ru_per_second(&sim), changed);
        let utilisation = throttled.iter().sum::<f64>() / (ru_per_sec * throttled.len() as f64);
        assert!(
            sim_stats.throttled_operations > 0,
            "the budget was exceeded"
        );
        assert!(
            stats.total.throttled_operations > 0,
            "the writer saw the throttles"
        );
        assert!(stats.retries > 0, "throttled operations were retried");
        assert_eq!(stats.succeeded, TOTAL);
        assert_eq!(stats.failed, 0);
        assert_eq!(stats.ranges.len(), 4, "{stats:?}");
        assert!(
            throttled.len() >= 3,
            "only {} whole seconds under the budget of {ru_per_sec} RU/s from second {changed}: {:?}",
            throttled.len(),
            ru_per_second(&sim)
        );
        assert!(
            utilisation >= 0.9,
            "used {:.0}% of {ru_per_sec} RU/s; RU per whole second: {throttled:?}",
            utilisation * 100.0
        );
        // The writer's heat map agrees with the server's.
        assert!(
            (stats.total.request_charge - used).abs() / used < 0.05,
            "{} vs {used}",
            stats.total.request_charge
        );
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_survives_a_split_503s_and_timeouts() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const TOTAL: u64 = 30_000;
        let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
        let c = setup(&sim).await;
        let config = BulkConfig {
            request_timeout: Duration::from_secs(2),
            ..BulkConfig::default()
        };
        // 5% of requests fail: half with 503, half held past the client's timeout.
        sim.set_error_rate_503(0.025);
        sim.set_timeout_rate(0.025, Duration::from_secs(3));
        let first = c.range_map().await.unwrap().ranges()[0].id.clone();
        let stats = run_bulk(&c, config, TOTAL, |seen| {
            if seen == TOTAL / 2 {
                sim.split_range(DB, COLL, &first).unwrap();
            }
        })
        .await;

        sim.set_error_rate_503(0.0);
        sim.set_timeout_rate(0.0, Duration::ZERO);
        assert_eq!(stored(&sim), TOTAL as usize, "every document is stored");
        assert!(stats.range_refreshes >= 1, "{stats:?}");
        assert!(
            stats.total.failed_batches > 0,
            "faults were injected and retried"
        );
        assert!(
            stats.ranges.len() >= 3,
            "the split range's children were written: {stats:?}"
        );
        assert_eq!(stats.failed, 0);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn exhausted_retries_are_reported_not_dropped() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
        let c = setup(&sim).await;
        c.range_map().await.unwrap();
        sim.set_error_rate_503(1.0);
        let config = BulkConfig {
            retry: cosmos::RetryPolicy {
                max_attempts: 3,
                base_backoff: Duration::from_millis(1),
                ..cosmos::RetryPolicy::default()
            },
            ..BulkConfig::default()
        };
        let (writer, mut outcomes) = c.bulk_writer::<u64>(config);
        for i in 0..250 {
            writer
                .submit(upsert(format!("d{i}"), format!("p{i}"), i))
                .await
                .unwrap();
        }
        writer.close().await;
        let mut count = 0;
        while let Some(o) = outcomes.next().await {
            count += 1;
            assert_eq!((o.status, o.attempts), (503, 3), "{o:?}");
            assert!(
                matches!(
                    o.error,
                    Some(FinalError::RetriesExhausted { attempts: 3, .. })
                ),
                "{o:?}"
            );
        }
        assert_eq!(count, 250);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn a_malformed_body_fails_alone_and_its_batch_mates_are_written() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
        let c = setup(&sim).await;
        let (writer, mut outcomes) = c.bulk_writer::<u64>(BulkConfig::default());
        for i in 0..50 {
            let mut op = upsert(format!("d{i}"), format!("p{i}"), i);
            if i == 25 {
                op.body = Bytes::from_static(b"{\"id\":\"p25\",");
            }
            writer.submit(op).await.unwrap();
        }
        writer.close().await;
        let mut n = 0;
        while let Some(o) = outcomes.next().await {
            n += 1;
            if o.context == 25 {
                assert!(matches!(o.error, Some(FinalError::Invalid(_))), "{o:?}");
            } else {
                assert!(o.is_success(), "{o:?}");
            }
        }
        assert_eq!(n, 50);
        assert_eq!(stored(&sim), 49);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn a_full_writer_makes_its_caller_wait() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
        let c = setup(&sim).await;
        c.range_map().await.unwrap();
        // Every request is held, so nothing leaves the writer until the hold ends.
        sim.set_latency(Duration::from_secs(1));
        let config = BulkConfig {
            queue_capacity: 100,
            ..BulkConfig::default()
        };
        let (writer, mut outcomes) = c.bulk_writer::<u64>(config);
        for i in 0..100 {
            writer
                .submit(upsert(format!("d{i}"), format!("p{i}"), i))
                .await
                .unwrap();
        }
        let blocked = writer.submit(upsert("d".into(), "extra".into(), 100));
        let waited = tokio::time::timeout(Duration::from_millis(300), blocked).await;
        assert!(
            waited.is_err(),
            "the 101st submit waits while 100 are inside"
        );
        sim.set_latency(Duration::ZERO);
        // Room comes back as outcomes arrive.
        writer
            .submit(upsert("d".into(), "extra".into(), 100))
            .await
            .unwrap();
        writer.close().await;
        let mut n = 0;
        while outcomes.next().await.is_some() {
            n += 1;
        }
        assert_eq!(n, 101);
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

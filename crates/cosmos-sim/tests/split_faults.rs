//! Faults while running: a range split (410/1002 on the old id, the children in pkranges,
//! documents still there), a change of RU/s, 503s, timeouts and latency, over the admin
//! endpoint and the library API.

mod common;

use common::{Op, Rest, batch_body, bulk_headers, start};
use cosmos_sim::CosmosSim;
use cosmos_wire::batch::{OperationResult, OperationType, partition_key_json};
use cosmos_wire::epk::{boundary_to_u128, epk_u128_of_str};
use cosmos_wire::headers as h;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

async fn admin(sim: &CosmosSim, method: Method, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .request(method, format!("{}_admin/{path}", sim.endpoint()))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn upserts(devices: &[String]) -> Vec<u8> {
    let docs: Vec<(String, String)> = devices
        .iter()
        .map(|d| {
            (
                partition_key_json(d),
                json!({"id": d, "deviceId": d}).to_string(),
            )
        })
        .collect();
    let ops: Vec<Op<'_>> = docs
        .iter()
        .map(|(pk, doc)| (OperationType::Upsert, pk.as_str(), None, Some(doc.as_str())))
        .collect();
    batch_body(&ops)
}

#[tokio::test]
async fn split_answers_410_1002_and_pkranges_shows_the_children() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, rest) = start(2, 1_000_000.0).await;
        let before = rest.ranges("db", "c").await;
        let hi0 = boundary_to_u128(&before[0].max_exclusive).unwrap();
        let devices: Vec<String> = (0..1000)
            .map(|i| format!("drone-{i}"))
            .filter(|d| epk_u128_of_str(d) < hi0)
            .take(60)
            .collect();
        let r = rest.post_docs(&bulk_headers("0"), upserts(&devices)).await;
        assert_eq!(r.status, 200);

        let (status, children) = admin(
            &sim,
            Method::POST,
            "split",
            json!({"database":"db","container":"c","rangeId":"0"}),
        )
        .await;
        assert_eq!(status, 200, "{children}");
        let after = rest.ranges("db", "c").await;
        assert_eq!(after.len(), 3);
        assert!(after.iter().all(|r| r.id != "0"));
        let kids: Vec<_> = after
            .iter()
            .filter(|r| r.parents == vec!["0".to_string()])
            .collect();
        assert_eq!(kids.len(), 2);
        assert_eq!(kids[0].min_inclusive, before[0].min_inclusive);
        assert_eq!(kids[0].max_exclusive, kids[1].min_inclusive);
        assert_eq!(kids[1].max_exclusive, before[0].max_exclusive);

        // The old id is gone, for batches and queries alike.
        let gone = rest.post_docs(&bulk_headers("0"), upserts(&devices)).await;
        assert_eq!(
            (gone.status.as_u16(), gone.header(h::SUBSTATUS)),
            (410, Some("1002"))
        );
        let q = rest
            .query(
                "db",
                "c",
                "SELECT * FROM c",
                json!([]),
                (h::PARTITION_KEY_RANGE_ID, "0".into()),
            )
            .await;
        assert_eq!(
            (q.status.as_u16(), q.header(h::SUBSTATUS)),
            (410, Some("1002"))
        );

        // A batch sent to one child with keys of both: the strangers get 410/1002 per operation.
        let r = rest
            .post_docs(&bulk_headers(&kids[0].id), upserts(&devices))
            .await;
        assert_eq!(r.status, 207);
        let results = serde_json::from_str::<Vec<OperationResult>>(&r.body.to_string()).unwrap();
        let kid_hi = boundary_to_u128(&kids[0].max_exclusive).unwrap();
        for (d, o) in devices.iter().zip(&results) {
            if epk_u128_of_str(d) < kid_hi {
                assert_eq!(o.status_code, 200, "{d}");
            } else {
                assert_eq!((o.status_code, o.sub_status_code), (410, 1002), "{d}");
            }
        }
        // Documents moved with their ranges: every one is still readable, and the children hold them all.
        for d in &devices {
            let r = rest
                .send(
                    Method::GET,
                    &format!("/dbs/db/colls/c/docs/{d}"),
                    &[(h::PARTITION_KEY, partition_key_json(d))],
                    None,
                )
                .await;
            assert_eq!(r.status, 200, "{d}");
        }
        let mut found = 0;
        for kid in &kids {
            let q = rest
                .query(
                    "db",
                    "c",
                    "SELECT VALUE c.id FROM c",
                    json!([]),
                    (h::PARTITION_KEY_RANGE_ID, kid.id.clone()),
                )
                .await;
            found += q.body["_count"].as_u64().unwrap();
        }
        assert_eq!(found, 60);
        let stats = sim.stats();
        let parts = &stats.container("db", "c").unwrap().partitions;
        assert_eq!(parts.iter().filter(|p| p.live).count(), 3);
        assert!(parts.iter().any(|p| p.id == "0" && !p.live));
        // Splitting an id that is gone is refused.
        assert!(sim.split_range("db", "c", "0").is_err());
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn throughput_change_resplits_the_budget() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder()
            .partitions(4)
            .ru_per_sec(400.0)
            .start()
            .await
            .unwrap();
        sim.create_container("db", "c", "/deviceId").unwrap();
        let (status, _) = admin(
            &sim,
            Method::POST,
            "throughput",
            json!({"database":"db","container":"c","ruPerSec": 8000}),
        )
        .await;
        assert_eq!(status, 200);
        let stats = sim.stats();
        let c = stats.container("db", "c").unwrap();
        assert_eq!(c.ru_per_sec, 8000.0);
        assert!(c.partitions.iter().all(|p| p.ru_budget_per_sec == 2000.0));
        sim.split_range("db", "c", "1").unwrap();
        let stats = sim.stats();
        let live: Vec<_> = stats
            .container("db", "c")
            .unwrap()
            .partitions
            .iter()
            .filter(|p| p.live)
            .collect();
        assert!(
            live.iter().all(|p| p.ru_budget_per_sec == 1600.0),
            "{live:?}"
        );
        let (status, _) = admin(
            &sim,
            Method::POST,
            "throughput",
            json!({"database":"db","container":"nope","ruPerSec": 10}),
        )
        .await;
        assert_eq!(status, 404);
        assert!(sim.set_ru_per_sec("db", "c", 0.0).is_err());
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn injected_503_timeouts_and_latency() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().start().await.unwrap();
        let rest = Rest::new(&sim.endpoint(), sim.key());
        let (status, settings) =
            admin(&sim, Method::POST, "faults", json!({"errorRate503": 1.0})).await;
        assert_eq!(
            (status, settings["errorRate503"].as_f64()),
            (200, Some(1.0))
        );
        let r = rest.send(Method::GET, "/dbs", &[], None).await;
        assert_eq!(r.status, 503);
        sim.set_error_rate_503(0.0);
        assert_eq!(rest.send(Method::GET, "/dbs", &[], None).await.status, 200);

        sim.set_timeout_rate(1.0, Duration::from_millis(300));
        let start = Instant::now();
        let r = rest.send(Method::GET, "/dbs", &[], None).await;
        assert_eq!(r.status, 408);
        assert!(start.elapsed() >= Duration::from_millis(300));
        sim.set_timeout_rate(0.0, Duration::ZERO);

        sim.set_latency(Duration::from_millis(200));
        let start = Instant::now();
        assert_eq!(rest.send(Method::GET, "/dbs", &[], None).await.status, 200);
        assert!(start.elapsed() >= Duration::from_millis(200));
        let (_, faults) = admin(&sim, Method::GET, "faults", Value::Null).await;
        assert_eq!(faults["latencyMs"], 200);

        let (status, stats) = admin(&sim, Method::GET, "stats", Value::Null).await;
        assert_eq!(status, 200);
        assert!(stats["requests"].as_u64().unwrap() >= 4);
    })
    .await
    .expect("the test finished within its time limit");
}

/// Documents over the size limit are refused alone (413 in a bulk batch, the others
/// written), as the service refuses documents over 2 MB; the limit is lowered at run time.
#[tokio::test]
async fn documents_over_the_size_limit_are_refused_alone() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, rest) = start(1, 1_000_000.0).await;
        let (_, faults) = admin(&sim, Method::GET, "faults", Value::Null).await;
        assert_eq!(faults["maxDocumentBytes"], 2 * 1024 * 1024);
        let (status, faults) = admin(
            &sim,
            Method::POST,
            "faults",
            json!({"maxDocumentBytes": 100}),
        )
        .await;
        assert_eq!(
            (status, faults["maxDocumentBytes"].as_u64()),
            (200, Some(100))
        );
        let small = json!({"id": "a", "deviceId": "a"}).to_string();
        let large = json!({"id": "b", "deviceId": "b", "pad": "x".repeat(100)}).to_string();
        let (pa, pb) = (partition_key_json("a"), partition_key_json("b"));
        let ops: Vec<Op<'_>> = vec![
            (
                OperationType::Create,
                pa.as_str(),
                None,
                Some(small.as_str()),
            ),
            (
                OperationType::Create,
                pb.as_str(),
                None,
                Some(large.as_str()),
            ),
        ];
        let r = rest.post_docs(&bulk_headers("0"), batch_body(&ops)).await;
        assert_eq!(r.status, 207);
        let results = serde_json::from_str::<Vec<OperationResult>>(&r.body.to_string()).unwrap();
        assert_eq!(results[0].status_code, 201);
        assert_eq!(results[1].status_code, 413);
        for (id, status) in [("a", 200), ("b", 404)] {
            let path = format!("/dbs/db/colls/c/docs/{id}");
            let headers = [(h::PARTITION_KEY, partition_key_json(id))];
            let r = rest.send(Method::GET, &path, &headers, None).await;
            assert_eq!(r.status, status, "{id}");
        }
        // Back to the service's limit: the same document is taken.
        sim.set_faults(cosmos_sim::FaultSettings {
            max_document_bytes: Some(cosmos_sim::MAX_DOCUMENT_BYTES),
            ..Default::default()
        });
        let ops: Vec<Op<'_>> = vec![(
            OperationType::Create,
            pb.as_str(),
            None,
            Some(large.as_str()),
        )];
        let r = rest.post_docs(&bulk_headers("0"), batch_body(&ops)).await;
        assert_eq!(r.status, 200);
    })
    .await
    .expect("the test finished within its time limit");
}

//! Batches over real HTTP: a bulk batch on a range answered per operation (410 for keys of
//! other ranges), the atomic batch all or nothing, conditional patch inside both, and the
//! undefined partition key in point operations, batches and queries.

mod common;

use common::{DOCS, Op, atomic_headers, batch_body, bulk_headers, start};
use cosmos_wire::batch::{
    OperationResult, OperationType, UNDEFINED_PARTITION_KEY_JSON, partition_key_json,
};
use cosmos_wire::epk::{boundary_to_u128, epk_u128_of_str, epk_u128_of_undefined};
use cosmos_wire::headers as h;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

fn body_of(ops: &[(OperationType, &str, Option<String>)]) -> Vec<u8> {
    let keys: Vec<String> = ops.iter().map(|(_, d, _)| partition_key_json(d)).collect();
    let ops: Vec<Op<'_>> = ops
        .iter()
        .zip(&keys)
        .map(|((kind, device, doc), pk)| {
            let id = if doc.is_none() { Some(*device) } else { None };
            (*kind, pk.as_str(), id, doc.as_deref())
        })
        .collect();
    batch_body(&ops)
}

fn doc(device: &str) -> Option<String> {
    Some(json!({"id": device, "deviceId": device, "t": 1}).to_string())
}

#[tokio::test]
async fn bulk_batch_on_a_range_answers_per_operation_and_410_for_strangers() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, rest) = start(4, 10_000.0).await;
        let ranges = rest.ranges("db", "c").await;
        let range = &ranges[1];
        let (lo, hi) = (
            boundary_to_u128(&range.min_inclusive).unwrap(),
            boundary_to_u128(&range.max_exclusive).unwrap(),
        );
        let devices: Vec<String> = (0..400).map(|i| format!("drone-{i}")).collect();
        let inside: Vec<&String> = devices
            .iter()
            .filter(|d| (lo..hi).contains(&epk_u128_of_str(d)))
            .take(5)
            .collect();
        let outside = devices
            .iter()
            .find(|d| !(lo..hi).contains(&epk_u128_of_str(d)))
            .unwrap();
        let mut ops: Vec<(OperationType, &str, Option<String>)> = inside
            .iter()
            .map(|d| (OperationType::Create, d.as_str(), doc(d)))
            .collect();
        ops.push((OperationType::Upsert, outside, doc(outside)));
        ops.push((OperationType::Read, inside[0], None));
        let headers = bulk_headers(&range.id);
        let r = rest.post_docs(&headers, body_of(&ops)).await;
        assert_eq!(r.status, 207);
        let results = serde_json::from_str::<Vec<OperationResult>>(&r.body.to_string()).unwrap();
        assert_eq!(results.len(), 7);
        assert!(
            results[..5]
                .iter()
                .all(|o| o.status_code == 201 && o.e_tag.is_some())
        );
        assert_eq!(
            (results[5].status_code, results[5].sub_status_code),
            (410, 1002)
        );
        assert_eq!(results[6].status_code, 200);
        assert_eq!(
            results[6].resource_body.as_ref().unwrap()["id"],
            inside[0].as_str()
        );
        let sum: f64 = results.iter().map(|o| o.request_charge).sum();
        assert!((r.charge() - sum).abs() < 0.05);

        let too_many: Vec<_> = (0..101)
            .map(|_| (OperationType::Read, inside[0].as_str(), None))
            .collect();
        let r = rest.post_docs(&headers, body_of(&too_many)).await;
        assert_eq!(r.status, 400);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn atomic_batch_is_all_or_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, rest) = start(4, 10_000.0).await;
        let d = "drone-9";
        let doc = |id: &str| Some(json!({"id": id, "deviceId": d}).to_string());
        let headers = atomic_headers(&partition_key_json(d));
        let ok = rest
            .send(
                Method::POST,
                DOCS,
                &headers,
                Some(body_of(&[(OperationType::Create, d, doc("a"))])),
            )
            .await;
        assert_eq!(ok.status, 200);
        let ops = [
            (OperationType::Create, d, doc("b")),
            (OperationType::Create, d, doc("a")),
            (OperationType::Create, d, doc("c")),
        ];
        let failed = rest.post_docs(&headers, body_of(&ops)).await;
        assert_eq!(failed.status, 409);
        let codes: Vec<u64> = failed
            .body
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["statusCode"].as_u64().unwrap())
            .collect();
        assert_eq!(codes, vec![424, 409, 424]);
        let b = rest
            .send(
                Method::GET,
                "/dbs/db/colls/c/docs/b",
                &[(h::PARTITION_KEY, partition_key_json(d))],
                None,
            )
            .await;
        assert_eq!(b.status, 404, "nothing of the failed batch applied");
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn conditional_patch_inside_bulk_and_atomic_batches() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, rest) = start(1, 10_000.0).await;
        for d in ["drone-a", "drone-b"] {
            let doc = json!({"id": d, "deviceId": d, "deviceTimeMs": 1000, "seq": 5});
            assert_eq!(rest.upsert("db", "c", &doc).await.status, 201);
        }
        let patch = |time: i64| {
            json!({
                "operations": [{"op": "set", "path": "/deviceTimeMs", "value": time}],
                "condition": format!("FROM c WHERE c.deviceTimeMs < {time}")
            })
            .to_string()
        };
        // Newer for drone-a, older for drone-b, and a device with no document yet.
        let (newer, older) = (patch(2000), patch(500));
        let ops = [
            ("drone-a", &newer),
            ("drone-b", &older),
            ("drone-c", &newer),
        ];
        let keys: Vec<String> = ops.iter().map(|(d, _)| partition_key_json(d)).collect();
        let ops: Vec<Op<'_>> = ops
            .iter()
            .zip(&keys)
            .map(|((d, p), pk)| {
                (
                    OperationType::Patch,
                    pk.as_str(),
                    Some(*d),
                    Some(p.as_str()),
                )
            })
            .collect();
        let r = rest.post_docs(&bulk_headers("0"), batch_body(&ops)).await;
        assert_eq!(r.status, 207);
        let codes: Vec<u64> = r
            .body
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["statusCode"].as_u64().unwrap())
            .collect();
        assert_eq!(codes, vec![200, 412, 404]);
        assert_eq!(r.body[0]["resourceBody"]["deviceTimeMs"], 2000);
        assert!(r.body[0]["requestCharge"].as_f64().unwrap() > 5.0);
        assert!(r.body[1]["requestCharge"].as_f64().unwrap() >= 1.0);

        // In a transactional batch a false condition fails the whole batch.
        let pk = partition_key_json("drone-a");
        let (first, second) = (patch(3000), patch(100));
        let ops: Vec<Op<'_>> = [&first, &second]
            .iter()
            .map(|p| {
                (
                    OperationType::Patch,
                    pk.as_str(),
                    Some("drone-a"),
                    Some(p.as_str()),
                )
            })
            .collect();
        let r = rest.post_docs(&atomic_headers(&pk), batch_body(&ops)).await;
        assert_eq!(r.status, 412);
        let read = rest
            .send(
                Method::GET,
                "/dbs/db/colls/c/docs/drone-a",
                &[(h::PARTITION_KEY, pk)],
                None,
            )
            .await;
        assert_eq!(
            read.body["deviceTimeMs"], 2000,
            "the first patch of the failed batch did not apply"
        );
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn undefined_key_for_point_operations_batches_and_queries() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, rest) = start(4, 10_000.0).await;
        let docs = DOCS;
        let undefined = || (h::PARTITION_KEY, UNDEFINED_PARTITION_KEY_JSON.to_string());
        let body = |v: Value| Some(v.to_string().into_bytes());

        let created = rest
            .send(
                Method::POST,
                docs,
                &[undefined()],
                body(json!({"id": "u1", "t": 1})),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.body);
        assert!(created.body.get("deviceId").is_none());
        assert!(created.body["_etag"].is_string());
        let read = rest
            .send(Method::GET, &format!("{docs}/u1"), &[undefined()], None)
            .await;
        assert_eq!((read.status.as_u16(), &read.body["t"]), (200, &json!(1)));
        // The undefined key is its own logical partition, not the string "{}" or "".
        for other in ["{}", ""] {
            let r = rest
                .send(
                    Method::GET,
                    &format!("{docs}/u1"),
                    &[(h::PARTITION_KEY, partition_key_json(other))],
                    None,
                )
                .await;
            assert_eq!(r.status, 404, "{other:?}");
        }
        // A document whose key contradicts the header is rejected, both ways.
        let keyed = rest
            .send(
                Method::POST,
                docs,
                &[undefined()],
                body(json!({"id": "k", "deviceId": "drone-1"})),
            )
            .await;
        assert_eq!(keyed.status, 400);
        assert_eq!(keyed.header(h::SUBSTATUS), Some("1001"));
        let keyless = rest
            .send(
                Method::POST,
                docs,
                &[(h::PARTITION_KEY, partition_key_json("drone-1"))],
                body(json!({"id": "k"})),
            )
            .await;
        assert_eq!(keyless.status, 400);
        assert_eq!(keyless.header(h::SUBSTATUS), Some("1001"));
        let patched = rest
            .send(
                Method::PATCH,
                &format!("{docs}/u1"),
                &[undefined()],
                body(json!({"operations": [{"op": "set", "path": "/t", "value": 2}]})),
            )
            .await;
        assert_eq!(
            (patched.status.as_u16(), &patched.body["t"]),
            (200, &json!(2))
        );

        // Atomic batch on the undefined key; one operation names it, one inherits the header.
        let undefined_range = rest
            .ranges("db", "c")
            .await
            .into_iter()
            .find(|r| {
                (boundary_to_u128(&r.min_inclusive).unwrap()
                    ..boundary_to_u128(&r.max_exclusive).unwrap())
                    .contains(&epk_u128_of_undefined())
            })
            .unwrap();
        let (u2, u3) = (
            json!({"id": "u2"}).to_string(),
            json!({"id": "u3"}).to_string(),
        );
        let atomic = batch_body(&[
            (
                OperationType::Create,
                UNDEFINED_PARTITION_KEY_JSON,
                None,
                Some(&u2),
            ),
            (
                OperationType::Create,
                UNDEFINED_PARTITION_KEY_JSON,
                None,
                Some(&u3),
            ),
        ]);
        let r = rest
            .send(
                Method::POST,
                docs,
                &atomic_headers(UNDEFINED_PARTITION_KEY_JSON),
                Some(atomic),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);

        // Bulk on the undefined key's range: a keyless document lands, a keyed one under [{}] does not.
        let (u4, bad) = (
            json!({"id": "u4"}).to_string(),
            json!({"id": "u5", "deviceId": "drone-1"}).to_string(),
        );
        let bulk = batch_body(&[
            (
                OperationType::Upsert,
                UNDEFINED_PARTITION_KEY_JSON,
                None,
                Some(&u4),
            ),
            (
                OperationType::Upsert,
                UNDEFINED_PARTITION_KEY_JSON,
                None,
                Some(&bad),
            ),
        ]);
        let r = rest
            .send(
                Method::POST,
                docs,
                &bulk_headers(&undefined_range.id),
                Some(bulk),
            )
            .await;
        let results = serde_json::from_str::<Vec<OperationResult>>(&r.body.to_string()).unwrap();
        let codes: Vec<(u16, u32)> = results
            .iter()
            .map(|o| (o.status_code, o.sub_status_code))
            .collect();
        assert_eq!(codes, vec![(201, 0), (400, 1001)]);

        // A keyed document in the same range stays out of the undefined partition's query.
        let (lo, hi) = (
            boundary_to_u128(&undefined_range.min_inclusive).unwrap(),
            boundary_to_u128(&undefined_range.max_exclusive).unwrap(),
        );
        let neighbour = (0..)
            .map(|i| format!("drone-{i}"))
            .find(|d| (lo..hi).contains(&epk_u128_of_str(d)))
            .unwrap();
        let keyed = json!({"id": "n", "deviceId": neighbour});
        assert_eq!(rest.upsert("db", "c", &keyed).await.status, 201);
        let q = rest
            .query("db", "c", "SELECT c.id FROM c", json!([]), undefined())
            .await;
        assert_eq!(q.status, 200);
        let mut ids: Vec<&str> = q.body["Documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["id"].as_str().unwrap())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, ["u1", "u2", "u3", "u4"]);
        let on_range = rest
            .query(
                "db",
                "c",
                "SELECT c.id FROM c",
                json!([]),
                (h::PARTITION_KEY_RANGE_ID, undefined_range.id.clone()),
            )
            .await;
        assert_eq!(on_range.body["_count"], 5, "{}", on_range.body);
        let deleted = rest
            .send(Method::DELETE, &format!("{docs}/u1"), &[undefined()], None)
            .await;
        assert_eq!(deleted.status, 204);
    })
    .await
    .expect("the test finished within its time limit");
}

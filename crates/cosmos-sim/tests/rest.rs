//! The REST surface over real HTTP: signatures, resources, documents and patch. Batches and
//! the undefined partition key are in `rest_batch.rs`.

mod common;

use common::{Rest, start};
use cosmos_sim::CosmosSim;
use cosmos_wire::batch::partition_key_json;
use cosmos_wire::epk::boundary_to_u128;
use cosmos_wire::headers as h;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

const VECTOR_KEY: &str =
    "dsZQi3KtZmCv1ljt3VNWNm7sQUF1y5rJfC6kv5JiwvW0EndXdDku/dkKBp8/ufDToSxLzR4y+O/0H/t4bQtVNw==";

#[tokio::test]
async fn published_signature_vector_is_accepted_and_a_changed_one_is_not() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().key(VECTOR_KEY).start().await.unwrap();
        let http = reqwest::Client::new();
        let get = |auth: &'static str| {
            http.get(format!("{}dbs/ToDoList", sim.endpoint()))
                .header("authorization", auth)
                .header(h::DATE, "Thu, 27 Apr 2017 00:51:12 GMT")
                .send()
        };
        let ok = get(
            "type%3Dmaster%26ver%3D1.0%26sig%3Dc09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu%2Bc%2Bc%3D",
        )
        .await
        .unwrap();
        // Signature accepted: the database just does not exist.
        assert_eq!(ok.status(), 404);
        let bad = get(
            "type%3Dmaster%26ver%3D1.0%26sig%3Dd09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu%2Bc%2Bc%3D",
        )
        .await
        .unwrap();
        assert_eq!(bad.status(), 401);
        let body: Value = bad.json().await.unwrap();
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains(r"'get\ndbs\ndbs/ToDoList\nthu, 27 apr 2017 00:51:12 gmt\n\n'"),
            "{body}"
        );
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn wrong_key_gets_401_with_the_signed_string() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().start().await.unwrap();
        let wrong = Rest::new(&sim.endpoint(), VECTOR_KEY);
        let r = wrong.send(Method::GET, "/dbs", &[], None).await;
        assert_eq!(r.status, 401);
        assert_eq!(r.body["code"], "Unauthorized");
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .contains(r"'get\ndbs\n\n"),
            "{}",
            r.body
        );
        assert!(r.header(h::REQUEST_CHARGE).is_some());
        let right = Rest::new(&sim.endpoint(), sim.key());
        assert_eq!(right.send(Method::GET, "/dbs", &[], None).await.status, 200);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn a_rotated_key_refuses_the_old_one_and_a_deleted_container_answers_404() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().start().await.unwrap();
        let old = Rest::new(&sim.endpoint(), sim.key());
        old.setup("db", "c").await;
        sim.rotate_key(VECTOR_KEY).unwrap();
        assert_eq!(old.send(Method::GET, "/dbs", &[], None).await.status, 401);
        let new = Rest::new(&sim.endpoint(), VECTOR_KEY);
        assert_eq!(
            new.send(Method::GET, "/dbs/db/colls/c", &[], None)
                .await
                .status,
            200
        );
        // Over the admin endpoint too.
        let answer = reqwest::Client::new()
            .post(format!("{}_admin/key", sim.endpoint()))
            .body(format!(r#"{{"key":"{}"}}"#, sim.key()))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(old.send(Method::GET, "/dbs", &[], None).await.status, 200);
        assert_eq!(new.send(Method::GET, "/dbs", &[], None).await.status, 401);

        sim.delete_container("db", "c").unwrap();
        let gone = old
            .send(Method::GET, "/dbs/db/colls/c/pkranges", &[], None)
            .await;
        assert_eq!(gone.status, 404);
        assert!(sim.delete_container("db", "c").is_err());
        sim.create_container("db", "c", "/deviceId").unwrap();
        assert_eq!(
            old.send(Method::GET, "/dbs/db/colls/c", &[], None)
                .await
                .status,
            200
        );
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn account_databases_containers_and_ranges() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
        let rest = Rest::new(&sim.endpoint(), sim.key());
        let account = rest.send(Method::GET, "/", &[], None).await;
        assert_eq!(account.status, 200);
        assert_eq!(
            account.body["writableLocations"][0]["databaseAccountEndpoint"],
            sim.endpoint()
        );
        assert!(account.body["queryEngineConfiguration"].is_string());
        rest.setup("db", "c").await;
        let again = rest
            .send(Method::POST, "/dbs", &[], Some(br#"{"id":"db"}"#.to_vec()))
            .await;
        assert_eq!(again.status, 409);
        let coll = rest.send(Method::GET, "/dbs/db/colls/c", &[], None).await;
        assert_eq!(
            coll.body["partitionKey"],
            json!({"paths":["/deviceId"],"kind":"Hash","version":2})
        );
        assert!(coll.body["indexingPolicy"]["includedPaths"].is_array());
        let list = rest.send(Method::GET, "/dbs/db/colls", &[], None).await;
        assert_eq!(list.body["_count"], 1);
        let ranges = rest.ranges("db", "c").await;
        assert_eq!(ranges.len(), 4);
        assert_eq!(ranges[0].min_inclusive, "");
        assert_eq!(ranges[3].max_exclusive, "FF");
        let widths: Vec<u128> = ranges
            .iter()
            .map(|r| {
                boundary_to_u128(&r.max_exclusive).unwrap()
                    - boundary_to_u128(&r.min_inclusive).unwrap()
            })
            .collect();
        assert!(
            widths.iter().all(|w| w.abs_diff(widths[0]) <= 3),
            "{widths:?}"
        );
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn documents_with_etags_preconditions_and_charges() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, rest) = start(4, 10_000.0).await;
        let pk = || (h::PARTITION_KEY, partition_key_json("drone-1"));
        let doc = json!({"id": "p1", "deviceId": "drone-1", "pad": "x".repeat(900)});
        let created = rest.post_docs(&[pk()], doc.to_string().into_bytes()).await;
        assert_eq!(created.status, 201);
        let insert_charge = created.charge();
        assert!((5.0..7.0).contains(&insert_charge), "{insert_charge}");
        let etag = created.body["_etag"].as_str().unwrap().to_string();
        assert!(created.body["_ts"].as_u64().unwrap() > 1_600_000_000);
        assert_eq!(created.header(h::ETAG), Some(etag.as_str()));
        let dup = rest.post_docs(&[pk()], doc.to_string().into_bytes()).await;
        assert_eq!(dup.status, 409);
        let overwrite = rest.upsert("db", "c", &doc).await;
        assert_eq!(overwrite.status, 200);
        assert!(
            overwrite.charge() > insert_charge * 1.3,
            "an overwrite costs more"
        );
        let read = rest
            .send(Method::GET, "/dbs/db/colls/c/docs/p1", &[pk()], None)
            .await;
        assert_eq!(read.status, 200);
        assert!((1.0..2.0).contains(&read.charge()), "about 1 RU per KB");
        assert_eq!(read.body["pad"], doc["pad"]);
        let new_etag = read.body["_etag"].as_str().unwrap().to_string();
        assert_ne!(new_etag, etag);
        let stale = rest
            .send(
                Method::PUT,
                "/dbs/db/colls/c/docs/p1",
                &[pk(), (h::IF_MATCH, etag)],
                Some(doc.to_string().into_bytes()),
            )
            .await;
        assert_eq!(stale.status, 412);
        let fresh = rest
            .send(
                Method::PUT,
                "/dbs/db/colls/c/docs/p1",
                &[pk(), (h::IF_MATCH, new_etag)],
                Some(doc.to_string().into_bytes()),
            )
            .await;
        assert_eq!(fresh.status, 200);
        let wrong_key = rest
            .send(
                Method::PUT,
                "/dbs/db/colls/c/docs/p1",
                &[(h::PARTITION_KEY, partition_key_json("drone-2"))],
                Some(doc.to_string().into_bytes()),
            )
            .await;
        assert_eq!(wrong_key.status, 400);
        let deleted = rest
            .send(Method::DELETE, "/dbs/db/colls/c/docs/p1", &[pk()], None)
            .await;
        assert_eq!(deleted.status, 204);
        let gone = rest
            .send(Method::GET, "/dbs/db/colls/c/docs/p1", &[pk()], None)
            .await;
        assert_eq!(gone.status, 404);
        assert!(gone.charge() >= 1.0);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn conditional_patch_applies_only_to_older_positions() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, rest) = start(4, 10_000.0).await;
        let pk = || (h::PARTITION_KEY, partition_key_json("drone-7"));
        let patch = |time: i64, seq: i64| {
            json!({
                "operations": [
                    {"op": "set", "path": "/location", "value": {"type": "Point", "coordinates": [1.0, 2.0]}},
                    {"op": "set", "path": "/deviceTimeMs", "value": time},
                    {"op": "set", "path": "/seq", "value": seq}
                ],
                "condition": format!("from c where c.deviceTimeMs < {time} or (c.deviceTimeMs = {time} and c.seq < {seq})")
            })
            .to_string()
            .into_bytes()
        };
        let missing = rest
            .send(
                Method::PATCH,
                "/dbs/db/colls/c/docs/drone-7",
                &[pk()],
                Some(patch(1000, 1)),
            )
            .await;
        assert_eq!(missing.status, 404);
        let doc = json!({"id": "drone-7", "deviceId": "drone-7", "deviceTimeMs": 1000, "seq": 5});
        assert_eq!(rest.upsert("db", "c", &doc).await.status, 201);
        let older = rest
            .send(
                Method::PATCH,
                "/dbs/db/colls/c/docs/drone-7",
                &[pk()],
                Some(patch(1000, 4)),
            )
            .await;
        assert_eq!(older.status, 412);
        let newer = rest
            .send(
                Method::PATCH,
                "/dbs/db/colls/c/docs/drone-7",
                &[pk()],
                Some(patch(1000, 6)),
            )
            .await;
        assert_eq!(newer.status, 200, "{}", newer.body);
        assert_eq!(newer.body["seq"], 6);
        assert_eq!(newer.body["location"]["coordinates"], json!([1.0, 2.0]));
        assert!(newer.charge() > 5.0);
        let bad = rest
            .send(
                Method::PATCH,
                "/dbs/db/colls/c/docs/drone-7",
                &[pk()],
                Some(br#"{"operations":[],"condition":"from c where"}"#.to_vec()),
            )
            .await;
        assert_eq!(bad.status, 400);
    })
    .await
    .expect("the test finished within its time limit");
}

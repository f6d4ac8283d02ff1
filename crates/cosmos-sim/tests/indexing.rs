//! The container's indexing policy over real HTTP: it decides what a write is charged (the
//! same document costs less where fewer paths are indexed, least with `indexingMode: none`),
//! an `ORDER BY` on a path it leaves out is refused with the service's message, and a policy
//! the service would refuse is refused when the container is created.

mod common;

use common::{Rest, start};
use cosmos_wire::batch::partition_key_json;
use cosmos_wire::headers as h;
use reqwest::Method;
use serde_json::{Value, json};

async fn create(rest: &Rest, coll: &str, policy: Value) -> common::Answer {
    let def = json!({"id": coll, "indexingPolicy": policy,
        "partitionKey": {"paths": ["/deviceId"], "kind": "Hash", "version": 2}});
    rest.send(
        Method::POST,
        "/dbs/db/colls",
        &[],
        Some(def.to_string().into_bytes()),
    )
    .await
}

fn position(seq: u64) -> Value {
    json!({"id": "d1", "deviceId": "d1", "kind": "latest", "seq": seq, "deviceTimeMs": 1000 + seq,
           "altM": 100 + seq, "speedMps": 10 + seq,
           "location": {"type": "Point", "coordinates": [-122.3 + seq as f64 / 1000.0, 47.6]}})
}

#[tokio::test]
async fn the_policy_sets_the_write_charge_and_what_a_query_may_order_by() {
    let (_sim, rest) = start(1, 10_000.0).await;
    rest.setup("db", "all").await;
    let narrow = json!({
        "includedPaths": [{"path": "/kind/?"}, {"path": "/deviceTimeMs/?"}],
        "excludedPaths": [{"path": "/*"}],
        "spatialIndexes": [{"path": "/location/*", "types": ["Point"]}],
    });
    assert_eq!(create(&rest, "narrow", narrow).await.status, 201);
    assert_eq!(
        create(&rest, "none", json!({"indexingMode": "none"}))
            .await
            .status,
        201
    );
    // Per container: the first position (a create), then the next (a replace).
    let mut charges = Vec::new();
    for coll in ["all", "narrow", "none"] {
        let first = rest.upsert("db", coll, &position(1)).await;
        let next = rest.upsert("db", coll, &position(2)).await;
        assert_eq!((first.status.as_u16(), next.status.as_u16()), (201, 200));
        charges.push((coll, first.charge(), next.charge()));
    }
    let [
        (_, all_create, all_replace),
        (_, narrow_create, narrow_replace),
        (_, none_create, none_replace),
    ] = charges[..]
    else {
        unreachable!()
    };
    assert!(
        all_create > narrow_create && narrow_create > none_create,
        "{charges:?}"
    );
    assert!(
        all_replace > narrow_replace && narrow_replace > none_replace,
        "{charges:?}"
    );
    // Without indexing a small document costs the size table's 1 KB figure, twice to replace.
    assert_eq!((none_create, none_replace), (5.0, 10.0));

    let pk = (h::PARTITION_KEY, partition_key_json("d1"));
    let by_time = rest
        .query(
            "db",
            "narrow",
            "SELECT * FROM c ORDER BY c.deviceTimeMs",
            json!([]),
            pk.clone(),
        )
        .await;
    assert_eq!(by_time.status, 200, "{:?}", by_time.body);
    let by_seq = rest
        .query(
            "db",
            "narrow",
            "SELECT * FROM c ORDER BY c.seq",
            json!([]),
            pk.clone(),
        )
        .await;
    assert_eq!(by_seq.status, 400);
    assert_eq!(
        by_seq.body["message"],
        "The index path corresponding to the specified order-by item is excluded."
    );
    let everywhere = rest
        .query("db", "all", "SELECT * FROM c ORDER BY c.seq", json!([]), pk)
        .await;
    assert_eq!(everywhere.status, 200);
}

#[tokio::test]
async fn a_policy_the_service_would_refuse_is_refused_at_creation() {
    let (_sim, rest) = start(1, 10_000.0).await;
    let refused = create(
        &rest,
        "rootless",
        json!({"includedPaths": [{"path": "/kind/?"}]}),
    )
    .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap()
            .contains("root path /*"),
        "{:?}",
        refused.body
    );
}

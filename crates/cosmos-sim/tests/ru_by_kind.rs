//! The partition stats count each write's charge under the `kind` of the document it wrote,
//! so that a run can tell what its latest documents cost from what its history cost.

mod common;

use common::start;
use serde_json::json;

#[tokio::test]
async fn each_charge_is_counted_under_the_kind_of_its_document() {
    let (sim, rest) = start(1, 10_000.0).await;
    let mut latest = 0.0;
    for seq in 1..=3 {
        let doc = json!({"id": "d1", "deviceId": "d1", "kind": "latest", "seq": seq});
        latest += rest.upsert("db", "c", &doc).await.charge();
    }
    let segment = json!({"id": "d1:seg:0", "deviceId": "d1", "kind": "segment",
        "startMs": 0, "endMs": 300_000, "points": [[1, 2500, -122.3, 47.6]]});
    let history = rest.upsert("db", "c", &segment).await.charge();
    let plain = rest
        .upsert("db", "c", &json!({"id": "x", "deviceId": "d2"}))
        .await
        .charge();
    let stats = sim.stats();
    let partition = &stats.container("db", "c").unwrap().partitions[0];
    let by_kind = &partition.ru_by_kind;
    assert_eq!(by_kind["latest"], latest, "{by_kind:?}");
    assert_eq!(by_kind["segment"], history, "{by_kind:?}");
    assert_eq!(by_kind[""], plain, "{by_kind:?}");
    assert_eq!(by_kind.values().sum::<f64>(), partition.ru_total);
}

//! Spatial queries return exactly the documents within the radius (checked against an
//! independent haversine) or inside the polygon, on each range and on one logical partition,
//! across pages of continuation tokens, with RU charged.

mod common;

use common::{Rest, start};
use cosmos_wire::batch::partition_key_json;
use cosmos_wire::headers as h;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;
// Not the endpoint's own distance: the check must not share the code it checks.
use test_harness::geo::independent_haversine_m as haversine;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Deterministic points scattered within about 5 km of the centre.
fn fixture() -> Vec<(String, String, (f64, f64))> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 1_000_000) as f64 / 1_000_000.0
    };
    (0..600)
        .map(|i| {
            let p = (
                -122.12 + (next() - 0.5) * 0.14,
                47.66 + (next() - 0.5) * 0.09,
            );
            (format!("pos-{i}"), format!("drone-{}", i % 40), p)
        })
        .collect()
}

/// All ids a query returns on every range, following continuation tokens in pages of 25.
async fn ids_everywhere(rest: &Rest, sql: &str, params: Value) -> (BTreeSet<String>, f64, usize) {
    let (mut ids, mut charge, mut pages) = (BTreeSet::new(), 0.0, 0);
    for range in rest.ranges("db", "c").await {
        let mut continuation: Option<String> = None;
        loop {
            let mut headers = vec![
                (h::IS_QUERY, "True".to_string()),
                ("content-type", "application/query+json".to_string()),
                (h::MAX_ITEM_COUNT, "25".to_string()),
                (h::PARTITION_KEY_RANGE_ID, range.id.clone()),
            ];
            if let Some(c) = &continuation {
                headers.push((h::CONTINUATION, c.clone()));
            }
            let body = json!({"query": sql, "parameters": params})
                .to_string()
                .into_bytes();
            let r = rest.post_docs(&headers, body).await;
            assert_eq!(r.status, 200, "{}", r.body);
            charge += r.charge();
            pages += 1;
            for d in r.body["Documents"].as_array().unwrap() {
                assert!(
                    ids.insert(d["id"].as_str().unwrap().to_string()),
                    "no duplicates across pages"
                );
            }
            continuation = r.header(h::CONTINUATION).map(str::to_string);
            if continuation.is_none() {
                break;
            }
        }
    }
    (ids, charge, pages)
}

#[tokio::test]
async fn st_distance_returns_exactly_the_documents_within_the_radius() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, rest) = start(4, 1_000_000.0).await;
        let docs = fixture();
        for (id, device, (lon, lat)) in &docs {
            let doc = json!({"id": id, "deviceId": device, "location": {"type": "Point", "coordinates": [lon, lat]}});
            assert_eq!(rest.upsert("db", "c", &doc).await.status, 201);
        }
        let center = (-122.12, 47.66);
        for radius in [500.0, 1000.0, 2500.0] {
            let expected: BTreeSet<String> = docs
                .iter()
                .filter(|(_, _, p)| haversine(*p, center) < radius)
                .map(|(id, _, _)| id.clone())
                .collect();
            assert!(!expected.is_empty() && expected.len() < docs.len());
            let (got, charge, pages) = ids_everywhere(
                &rest,
                "SELECT c.id FROM c WHERE ST_DISTANCE(c.location, {'type': 'Point', 'coordinates': [-122.12, 47.66]}) < @r",
                json!([{"name": "@r", "value": radius}]),
            )
            .await;
            assert_eq!(got, expected, "radius {radius}");
            assert!(pages > 4 || expected.len() < 25);
            assert!(
                charge >= 2.3 * pages as f64 + 0.02 * docs.len() as f64 - 0.01,
                "{charge}"
            );
        }

        // One logical partition, by its key.
        let device = "drone-3";
        let expected: BTreeSet<String> = docs
            .iter()
            .filter(|(_, d, p)| d == device && haversine(*p, center) < 3000.0)
            .map(|(id, _, _)| id.clone())
            .collect();
        let r = rest
            .query(
                "db",
                "c",
                "SELECT * FROM c WHERE ST_DISTANCE(c.location, {'type': 'Point', 'coordinates': [-122.12, 47.66]}) < 3000",
                json!([]),
                (h::PARTITION_KEY, partition_key_json(device)),
            )
            .await;
        let got: BTreeSet<String> = r.body["Documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(got, expected);

        // A cross-partition query with neither a key nor a range gets the service's 400.
        let r = rest
            .query(
                "db",
                "c",
                "SELECT * FROM c",
                json!([]),
                ("x-ms-documentdb-query-enablecrosspartition", "True".into()),
            )
            .await;
        assert_eq!(r.status, 400);
        assert!(r.body["additionalErrorInfo"].is_string());
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test]
async fn st_within_a_polygon() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, rest) = start(2, 1_000_000.0).await;
        let docs = fixture();
        for (id, device, (lon, lat)) in &docs {
            let doc = json!({"id": id, "deviceId": device, "location": {"type": "Point", "coordinates": [lon, lat]}});
            assert_eq!(rest.upsert("db", "c", &doc).await.status, 201);
        }
        let (w, e, s, n) = (-122.15, -122.10, 47.64, 47.67);
        let expected: BTreeSet<String> = docs
            .iter()
            .filter(|(_, _, (lon, lat))| *lon > w && *lon < e && *lat > s && *lat < n)
            .map(|(id, _, _)| id.clone())
            .collect();
        assert!(!expected.is_empty());
        let polygon =
            json!({"type": "Polygon", "coordinates": [[[w, s], [e, s], [e, n], [w, n], [w, s]]]});
        let (got, _, _) = ids_everywhere(
            &rest,
            "SELECT c.id FROM c WHERE ST_WITHIN(c.location, @area)",
            json!([{"name": "@area", "value": polygon}]),
        )
        .await;
        assert_eq!(got, expected);
    })
    .await
    .expect("the test finished within its time limit");
}

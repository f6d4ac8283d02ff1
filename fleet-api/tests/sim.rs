//! The API against the local Cosmos endpoint (`cosmos-sim`, in process, 4 ranges): near and
//! within answers equal an independent haversine / point-in-polygon over the stored
//! documents; a near query takes one call per range, in parallel or serially; by id takes
//! one call and a track two (one per history format); splits and 429s are absorbed; bad input is a 400 that says why.

mod common;

use std::collections::BTreeSet;

use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use serde_json::json;

const DRONES: usize = 240;

async fn fleet(options: ApiOptions) -> (CosmosSim, Vec<serde_json::Value>, String) {
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let docs = seed_latest(&c, &scatter(DRONES, 0x5eed)).await;
    let (base, _stop) = serve(c, options).await;
    (sim, docs, base)
}

#[tokio::test]
async fn near_equals_an_independent_haversine_and_takes_one_call_per_range() {
    let (sim, docs, base) = fleet(ApiOptions::default()).await;
    for radius in [800.0, 2500.0] {
        let near_edge = docs
            .iter()
            .filter(|d| (haversine(HOME, point_of(d)) - radius).abs() < 0.01)
            .count();
        assert_eq!(
            near_edge, 0,
            "a document lies on the circle's edge: pick another seed"
        );
        let got = get(&format!(
            "{base}/api/drones/near?lat={}&lon={}&radius_m={radius}",
            HOME.1, HOME.0
        ))
        .await;
        assert_eq!(got.status, 200, "{}", got.body);
        let found = ids(&got.body);
        let want = expected(&docs, |p| haversine(HOME, p) <= radius);
        assert!(
            !want.is_empty() && want.len() < DRONES,
            "{} of {DRONES}",
            want.len()
        );
        assert_eq!(found.iter().cloned().collect::<BTreeSet<_>>(), want);
        assert_eq!(found.len(), want.len(), "no duplicates");
        // Sorted by distance, and each distance is the independent one.
        let distances: Vec<f64> = got.body["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["properties"]["distanceM"].as_f64().unwrap())
            .collect();
        assert!(distances.windows(2).all(|w| w[0] <= w[1]), "{distances:?}");
        for f in got.body["features"].as_array().unwrap() {
            let c = &f["geometry"]["coordinates"];
            let p = (c[0].as_f64().unwrap(), c[1].as_f64().unwrap());
            let d = f["properties"]["distanceM"].as_f64().unwrap();
            assert!(
                (d - haversine(HOME, p)).abs() < 0.01,
                "{d} vs {}",
                haversine(HOME, p)
            );
            for field in ["seq", "deviceTime", "ageS"] {
                assert!(f["properties"].get(field).is_some(), "{field} in {f}");
            }
        }
        assert_eq!(got.calls, 4, "one call per range");
        assert_eq!(got.parallelism, 4, "the four ranges at once");
        assert!(got.charge > 4.0 * 2.0, "{}", got.charge);
    }
    // limit keeps the nearest.
    let limited = get(&format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=2500&limit=3",
        HOME.1, HOME.0
    ))
    .await;
    let all = get(&format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=2500",
        HOME.1, HOME.0
    ))
    .await;
    assert_eq!(ids(&limited.body), ids(&all.body)[..3].to_vec());
    assert_eq!(limited.body["numberMatched"], all.body["numberReturned"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn serial_asks_one_range_at_a_time_for_the_same_answer() {
    let options = ApiOptions {
        max_parallelism: 1,
        ..ApiOptions::default()
    };
    let (sim, docs, base) = fleet(options).await;
    let got = get(&format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=2000",
        HOME.1, HOME.0
    ))
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.calls, 4);
    assert_eq!(got.parallelism, 1);
    let want = expected(&docs, |p| haversine(HOME, p) <= 2000.0);
    assert_eq!(ids(&got.body).into_iter().collect::<BTreeSet<_>>(), want);
    sim.shutdown().await;
}

#[tokio::test]
async fn within_a_bbox_and_a_polygon_equals_an_independent_point_in_polygon() {
    let (sim, docs, base) = fleet(ApiOptions::default()).await;
    let (w, s, e, n) = (HOME.0 - 0.03, HOME.1 - 0.02, HOME.0 + 0.025, HOME.1 + 0.015);
    let got = get(&format!("{base}/api/drones/within?bbox={w},{s},{e},{n}")).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let want = expected(&docs, |p| p.0 > w && p.0 < e && p.1 > s && p.1 < n);
    assert!(!want.is_empty() && want.len() < DRONES);
    assert_eq!(
        ids(&got.body),
        want.iter().cloned().collect::<Vec<_>>(),
        "sorted by id"
    );
    assert_eq!(got.calls, 4);

    // A triangle, given clockwise (the API turns it round for Cosmos DB).
    let ring = [
        (HOME.0 - 0.05, HOME.1 - 0.04),
        (HOME.0, HOME.1 + 0.045),
        (HOME.0 + 0.06, HOME.1 - 0.03),
        (HOME.0 - 0.05, HOME.1 - 0.04),
    ];
    let polygon = json!({"type": "Polygon", "coordinates": [ring.iter().map(|p| [p.0, p.1]).collect::<Vec<_>>()]});
    let got = post(&format!("{base}/api/drones/within"), polygon.to_string()).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let want = expected(&docs, |p| inside(p, &ring));
    assert!(!want.is_empty() && want.len() < DRONES);
    assert_eq!(ids(&got.body), want.iter().cloned().collect::<Vec<_>>());
    sim.shutdown().await;
}

#[tokio::test]
async fn one_drone_takes_one_call_and_its_track_one_per_history_format() {
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let points = scatter(20, 7);
    let docs = seed_latest(&c, &points).await;
    // 90 minutes of history, one a minute: the default hour holds the newest 60.
    let times = seed_history(&c, "drone-3", 90, points[3]).await;
    seed_history(&c, "drone-4", 5, points[4]).await;
    let (base, _stop) = serve(c.clone(), ApiOptions::default()).await;

    let got = get(&format!("{base}/api/drones/drone-3")).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.calls, 1);
    assert!(
        got.charge > 0.0 && got.charge < 2.0,
        "a point read is about 1 RU: {}",
        got.charge
    );
    assert_eq!(got.body["id"], "drone-3");
    assert_eq!(got.body["geometry"], docs[3]["location"]);
    assert_eq!(got.body["properties"]["seq"], 10);

    // A device id that Cosmos DB cannot take as a document id as it is (escaped by the writer).
    let odd = position("odd#1?x", 4, HOME, std::time::Duration::from_secs(1));
    let doc = telemetry::DocumentLayout::default().latest(&odd, None);
    c.upsert("odd#1?x", &serde_json::to_vec(&doc).unwrap())
        .await
        .unwrap();
    let got = get(&format!("{base}/api/drones/odd%231%3Fx")).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["id"], "odd#1?x");

    let missing = get(&format!("{base}/api/drones/drone-999")).await;
    assert_eq!(missing.status, 404);
    assert!(
        missing.body["message"]
            .as_str()
            .unwrap()
            .contains("drone-999")
    );
    assert_eq!(missing.calls, 1);

    let track = get(&format!("{base}/api/drones/drone-3/track")).await;
    assert_eq!(track.status, 200, "{}", track.body);
    assert_eq!(
        track.calls, 2,
        "a query per history format on the drone's partition"
    );
    assert_eq!(track.body["geometry"]["type"], "LineString");
    let seqs: Vec<u64> = serde_json::from_value(track.body["properties"]["seq"].clone()).unwrap();
    assert_eq!(
        seqs,
        (31..=90).collect::<Vec<u64>>(),
        "the last hour, oldest first"
    );

    let since = times[79].to_rfc3339();
    let url = url::Url::parse_with_params(
        &format!("{base}/api/drones/drone-3/track"),
        [("since", &since)],
    )
    .unwrap();
    let track = get(url.as_str()).await;
    let seqs: Vec<u64> = serde_json::from_value(track.body["properties"]["seq"].clone()).unwrap();
    assert_eq!(seqs, (80..=90).collect::<Vec<u64>>());
    let empty = get(&format!("{base}/api/drones/drone-5/track")).await;
    assert_eq!(empty.status, 200);
    assert_eq!(empty.body["geometry"], serde_json::Value::Null);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_split_during_use_refreshes_the_ranges_and_keeps_the_answer() {
    let (sim, docs, base) = fleet(ApiOptions::default()).await;
    let url = format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=3000",
        HOME.1, HOME.0
    );
    let before = get(&url).await;
    assert_eq!(before.calls, 4);
    sim.split_range("telemetry", "positions", "1").unwrap();
    let after = get(&url).await;
    assert_eq!(after.status, 200, "{}", after.body);
    let want = expected(&docs, |p| haversine(HOME, p) <= 3000.0);
    assert_eq!(ids(&after.body).into_iter().collect::<BTreeSet<_>>(), want);
    assert_eq!(ids(&after.body).len(), want.len(), "no duplicates");
    // Four calls, one of them answered 410, then the two children of the split range.
    assert_eq!(after.calls, 6, "{after:?}");
    let again = get(&url).await;
    assert_eq!(again.calls, 5, "five ranges now");
    sim.shutdown().await;
}

#[tokio::test]
async fn throttled_calls_are_retried_after_their_retry_after() {
    let (sim, docs, base) = fleet(ApiOptions::default()).await;
    // 4 RU/s per range: a query page (about 3 RU) leaves too little for the next one, which
    // waits well under the read's throttle wait (fleet_api::READ_THROTTLE_WAIT).
    sim.set_ru_per_sec("telemetry", "positions", 16.0).unwrap();
    let url = format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=3000",
        HOME.1, HOME.0
    );
    let first = get(&url).await;
    let second = get(&url).await;
    let want = expected(&docs, |p| haversine(HOME, p) <= 3000.0);
    for got in [&first, &second] {
        assert_eq!(got.status, 200, "{}", got.body);
        assert_eq!(ids(&got.body).into_iter().collect::<BTreeSet<_>>(), want);
    }
    assert!(
        second.throttled >= 4,
        "every range throttled once at least: {second:?}"
    );
    assert_eq!(second.calls, 4 + second.throttled);
    let metrics = get(&format!("{base}/metrics")).await;
    let text = metrics.body.as_str().unwrap();
    assert!(
        text.contains(&format!(
            "fleet_api_cosmos_throttled_total{{route=\"near\"}} {}",
            first.throttled + second.throttled
        )),
        "{text}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_read_throttled_past_its_wait_is_a_503_with_retry_after() {
    let (sim, _docs, base) = fleet(ApiOptions {
        throttle_wait: std::time::Duration::ZERO,
        ..ApiOptions::default()
    })
    .await;
    // 4 RU/s per range: the first query leaves too little for the second, which gives up.
    sim.set_ru_per_sec("telemetry", "positions", 16.0).unwrap();
    let url = format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=3000",
        HOME.1, HOME.0
    );
    assert_eq!(get(&url).await.status, 200);
    let response = reqwest::get(&url).await.unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(
        response.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let throttled: u32 = response.headers()["x-query-throttled"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(throttled >= 1, "a range was throttled: {throttled}");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "throttled");
    sim.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_a_400_that_says_what_is_wrong() {
    let (sim, _docs, base) = fleet(ApiOptions {
        max_radius_m: 10_000.0,
        ..ApiOptions::default()
    })
    .await;
    for (path, says) in [
        ("/api/drones/near?lat=95&lon=0&radius_m=10", "latitude 95"),
        (
            "/api/drones/near?lat=0&lon=-181&radius_m=10",
            "longitude -181",
        ),
        (
            "/api/drones/near?lat=0&lon=0&radius_m=20000",
            "largest radius",
        ),
        ("/api/drones/near?lat=0&lon=0", "'radius_m' is missing"),
        (
            "/api/drones/near?lat=x&lon=0&radius_m=1",
            "lat: 'x' is not a number",
        ),
        (
            "/api/drones/near?lat=0&lon=0&radius=1",
            "unknown parameter 'radius'",
        ),
        ("/api/drones/near?lat=0&lon=0&radius_m=1&limit=0", "limit"),
        (
            "/api/drones/within?bbox=1,2,3",
            "minLon,minLat,maxLon,maxLat",
        ),
        ("/api/drones/within?bbox=3,2,1,4", "below maxLon"),
        ("/api/drones/drone-1/track?since=yesterday", "since"),
        ("/api/drones/a%2Fb", "drone id"),
        ("/api/drones/%FF%FE", "drone id"),
    ] {
        let got = get(&format!("{base}{path}")).await;
        assert_eq!(got.status, 400, "{path}: {}", got.body);
        assert_eq!(got.body["error"], "bad_request", "{path}");
        let message = got.body["message"].as_str().unwrap();
        assert!(message.contains(says), "{path}: {message}");
        assert_eq!(got.calls, 0, "{path}: nothing asked of Cosmos DB");
    }
    let not_json = post(&format!("{base}/api/drones/within"), "{").await;
    assert_eq!(not_json.status, 400);
    assert!(
        not_json.body["message"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
    let open = json!({"type":"Polygon","coordinates":[[[0,0],[0,1],[1,1],[1,0]]]});
    let got = post(&format!("{base}/api/drones/within"), open.to_string()).await;
    assert_eq!(got.status, 400);
    assert!(got.body["message"].as_str().unwrap().contains("not closed"));
    let huge = vec![b' '; fleet_api::MAX_BODY_BYTES + 1];
    let got = post(&format!("{base}/api/drones/within"), huge).await;
    assert_eq!(got.status, 413, "{}", got.body);
    // Device ids with characters Cosmos DB escapes are read like any other.
    let odd = get(&format!("{base}/api/drones/drone%231%3Fx")).await;
    assert_eq!(odd.status, 404, "{}", odd.body);
    // The server still answers after all that.
    assert_eq!(get(&format!("{base}/api/drones/drone-1")).await.status, 200);
    sim.shutdown().await;
}

#[tokio::test]
async fn small_pages_follow_continuation_tokens_to_the_same_answer() {
    let (sim, docs, base) = fleet(ApiOptions {
        page_size: 7,
        ..ApiOptions::default()
    })
    .await;
    let got = get(&format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=4000",
        HOME.1, HOME.0
    ))
    .await;
    assert_eq!(got.status, 200, "{}", got.body);
    let want = expected(&docs, |p| haversine(HOME, p) <= 4000.0);
    let found = ids(&got.body);
    assert_eq!(found.len(), want.len(), "no duplicates across pages");
    assert_eq!(found.into_iter().collect::<BTreeSet<_>>(), want);
    // At least one page per 7 drones on each range, and one per range at the least.
    assert!(
        got.calls as usize >= want.len().div_ceil(7).max(4),
        "{got:?}"
    );
    sim.shutdown().await;
}

/// The answers' drones, positions and distances: what a read answers, without the ages.
fn answer_of(got: &Got) -> Vec<serde_json::Value> {
    assert_eq!(got.status, 200, "{}", got.body);
    let features = got.body["features"].as_array().cloned();
    features
        .unwrap_or_else(|| vec![got.body.clone()])
        .into_iter()
        .map(|f| {
            json!([
                f["id"],
                f["geometry"],
                f["properties"]["distanceM"],
                f["properties"]["seq"]
            ])
        })
        .collect()
}

#[tokio::test]
async fn the_answers_are_the_same_under_the_projects_indexing_policy_and_the_default() {
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let cosmos = client(&sim.endpoint(), sim.key());
    let ours = container(&cosmos, "positions").await;
    let everything = container_indexing_everything(&cosmos, "indexed").await;
    let points = scatter(DRONES, 0x1d3);
    for c in [&ours, &everything] {
        seed_latest(c, &points).await;
        seed_history(c, "drone-3", 30, points[3]).await;
    }
    let (a, _stop_a) = serve(ours, ApiOptions::default()).await;
    let (b, _stop_b) = serve(everything, ApiOptions::default()).await;
    for path in [
        format!(
            "/api/drones/near?lat={}&lon={}&radius_m=2500",
            HOME.1, HOME.0
        ),
        format!(
            "/api/drones/within?bbox={},{},{},{}",
            HOME.0 - 0.03,
            HOME.1 - 0.02,
            HOME.0 + 0.02,
            HOME.1 + 0.03
        ),
        "/api/drones".to_string(),
        "/api/drones/drone-3".to_string(),
        "/api/drones/drone-3/track".to_string(),
    ] {
        let (under_ours, under_default) = (
            get(&format!("{a}{path}")).await,
            get(&format!("{b}{path}")).await,
        );
        assert_eq!(answer_of(&under_ours), answer_of(&under_default), "{path}");
        assert!(!answer_of(&under_ours).is_empty(), "{path}");
    }
    sim.shutdown().await;
}

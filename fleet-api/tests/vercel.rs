//! The API against `@vercel/cosmosdb-server` (an independent implementation from npm, one
//! range, spatial functions from turf): near and within answers equal an independent
//! haversine / point-in-polygon over the stored documents; by id takes one call, a track
//! one per history format, and a track of history documents and segments equals the
//! positions sent across pages.
//! (That server answers a point read of a missing document with 500, so the 404 is tested
//! against the local endpoint only.)

mod common;

use std::collections::BTreeSet;

use common::*;
use cosmos_wire::auth::EMULATOR_KEY;
use fleet_api::ApiOptions;
use serde_json::json;
use test_harness::CosmosDbServer;

#[tokio::test]
async fn near_within_one_and_track_against_an_independent_server() {
    let server = CosmosDbServer::start().unwrap();
    let c = container(&client(&server.endpoint(), EMULATOR_KEY), "positions").await;
    let points = scatter(120, 0xfeed);
    let docs = seed_latest(&c, &points).await;
    seed_history(&c, "drone-2", 10, points[2]).await;
    let (base, _stop) = serve(c.clone(), ApiOptions::default()).await;

    let radius = 2500.0;
    let got = get(&format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m={radius}",
        HOME.1, HOME.0
    ))
    .await;
    assert_eq!(got.status, 200, "{}", got.body);
    let want = expected(&docs, |p| haversine(HOME, p) <= radius);
    assert!(!want.is_empty() && want.len() < docs.len());
    let found = ids(&got.body);
    assert_eq!(found.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(found.len(), want.len());
    assert_eq!(got.calls, 1, "one range, one call");
    for f in got.body["features"].as_array().unwrap() {
        let c = &f["geometry"]["coordinates"];
        let p = (c[0].as_f64().unwrap(), c[1].as_f64().unwrap());
        let d = f["properties"]["distanceM"].as_f64().unwrap();
        assert!((d - haversine(HOME, p)).abs() < 0.01, "{d}");
    }

    let (w, s, e, n) = (HOME.0 - 0.03, HOME.1 - 0.02, HOME.0 + 0.025, HOME.1 + 0.015);
    let got = get(&format!("{base}/api/drones/within?bbox={w},{s},{e},{n}")).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let want = expected(&docs, |p| p.0 > w && p.0 < e && p.1 > s && p.1 < n);
    assert!(!want.is_empty());
    assert_eq!(ids(&got.body), want.iter().cloned().collect::<Vec<_>>());

    let ring = [
        (HOME.0 - 0.05, HOME.1 - 0.04),
        (HOME.0 + 0.06, HOME.1 - 0.03),
        (HOME.0, HOME.1 + 0.045),
        (HOME.0 - 0.05, HOME.1 - 0.04),
    ];
    let polygon = json!({"type": "Feature", "properties": {}, "geometry": {"type": "Polygon", "coordinates": [ring.iter().map(|p| [p.0, p.1]).collect::<Vec<_>>()]}});
    let got = post(&format!("{base}/api/drones/within"), polygon.to_string()).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let want = expected(&docs, |p| inside(p, &ring));
    assert!(!want.is_empty());
    assert_eq!(ids(&got.body), want.iter().cloned().collect::<Vec<_>>());

    let one = get(&format!("{base}/api/drones/drone-2")).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.calls, 1);
    assert_eq!(one.body["geometry"], docs[2]["location"]);

    let track = get(&format!("{base}/api/drones/drone-2/track")).await;
    assert_eq!(track.status, 200, "{}", track.body);
    assert_eq!(track.calls, 2, "a query per history format");
    let seqs: Vec<u64> = serde_json::from_value(track.body["properties"]["seq"].clone()).unwrap();
    assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
    assert_eq!(track.body["geometry"]["type"], "LineString");

    // Upgraded mid-flight: history documents, then segments (5 positions in both).
    let start = (chrono::Utc::now().timestamp_millis() - 15 * 60_000) / 60_000 * 60_000;
    let sent = track::flight(50, start + 20_000, 5_000, HOME);
    track::write(&c, "drone-3", &track::history("drone-3", &sent[..25])).await;
    track::write(
        &c,
        "drone-3",
        &track::segments("drone-3", &sent[20..], 60_000),
    )
    .await;
    for limit in ["6", "1000"] {
        let got = track::follow(&base, "drone-3", &[("since", "20m"), ("limit", limit)]).await;
        assert_eq!(got.sent, sent, "limit {limit}");
    }
}

//! A drone's track against the local Cosmos endpoint (`cosmos-sim`, 4 ranges): the positions
//! it sent come back in order, each once, across segment boundaries and pages, from track
//! segments, from the one-document-per-position history of before, and from a container
//! holding both; a span over `TRACK_MAX_SPAN` and a continuation that is not one are refused
//! with 400 before Cosmos DB is asked; each page is charged to its caller's RU budget.

mod common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::track::*;
use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::RuBudget;

/// The segment stretch the test writes: a minute (12 positions 5 s apart).
const STRETCH_MS: i64 = 60_000;

/// The start of a flight 20 minutes ago, on a whole minute; and the query of a span that
/// holds it.
fn start() -> (i64, [(&'static str, String); 2]) {
    let now = Utc::now().timestamp_millis();
    let start = (now - 20 * 60_000).div_euclid(STRETCH_MS) * STRETCH_MS;
    let text = |ms: i64| {
        DateTime::<Utc>::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339()
    };
    (
        start,
        [("since", text(start - 60_000)), ("until", text(now))],
    )
}

fn query<'a>(span: &'a [(&'static str, String); 2], limit: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut q: Vec<(&str, &str)> = span.iter().map(|(k, v)| (*k, v.as_str())).collect();
    if !limit.is_empty() {
        q.push(("limit", limit));
    }
    q
}

#[tokio::test]
async fn a_track_of_segments_equals_the_positions_sent_across_boundaries_and_pages() {
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let c = segment_container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let (start, span) = start();
    // 10 minutes 5 s apart, from 32.5 s into a minute: 11 segments, the first and last
    // half full.
    let sent = flight(120, start + 32_500, 5_000, HOME);
    let documents = segments("drone-1", &sent, STRETCH_MS);
    assert_eq!(documents.len(), 11);
    write(&c, "drone-1", &documents).await;
    // Another drone's segments in the same span stay out of drone-1's track.
    write(
        &c,
        "drone-2",
        &segments("drone-2", &flight(30, start, 5_000, HOME), STRETCH_MS),
    )
    .await;
    let (base, _stop) = serve(c.clone(), ApiOptions::default()).await;

    // Pages of 7 (ending inside segments, never on their boundaries alone) and of 12 (a
    // segment's worth), and one page for all.
    for (limit, pages) in [("7", 18), ("12", 10), ("1000", 1)] {
        let got = follow(&base, "drone-1", &query(&span, limit)).await;
        assert_eq!(got.sent, sent, "limit {limit}");
        assert!(
            got.pages.iter().all(|n| *n <= limit.parse().unwrap()),
            "{:?}",
            got.pages
        );
        assert!(got.pages.len() >= pages, "limit {limit}: {:?}", got.pages);
        assert!(got.charges.iter().all(|c| *c > 0.0), "{:?}", got.charges);
    }
    // A document that is not a segment, among them, is left out; the rest reads on.
    let broken = serde_json::json!({"id": "drone-1:seg:0", "deviceId": "drone-1", "kind": "segment",
        "startMs": start + 4 * STRETCH_MS + 1, "endMs": start + 5 * STRETCH_MS, "points": "none"});
    write(&c, "drone-1", &[broken]).await;
    for limit in ["3", "1000"] {
        assert_eq!(
            follow(&base, "drone-1", &query(&span, limit)).await.sent,
            sent,
            "limit {limit}"
        );
    }
    // A page of one, across the whole flight.
    let ones = follow(&base, "drone-1", &query(&span, "1")).await;
    assert_eq!(ones.sent, sent);
    assert!(ones.pages.iter().all(|n| *n == 1));
    // The span cuts the track by device time: positions from the third minute on.
    let since = DateTime::<Utc>::from_timestamp_millis(start + 2 * 60_000)
        .unwrap()
        .to_rfc3339();
    let got = follow(
        &base,
        "drone-1",
        &[("since", &since), ("until", &span[1].1)],
    )
    .await;
    assert_eq!(got.sent, sent[18..]);
    sim.shutdown().await;
}

#[tokio::test]
async fn old_history_still_reads_and_a_mixed_container_reads_both_once() {
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let cosmos = client(&sim.endpoint(), sim.key());
    let (start, span) = start();
    let sent = flight(60, start + 1_000, 5_000, HOME);

    // A container of the indexing policy before segments, holding history documents only.
    let old = container(&cosmos, "before-segments").await;
    write(&old, "drone-1", &history("drone-1", &sent)).await;
    let (base, _stop) = serve(old, ApiOptions::default()).await;
    for limit in ["9", "1000"] {
        let got = follow(&base, "drone-1", &query(&span, limit)).await;
        assert_eq!(got.sent, sent, "limit {limit}");
    }

    // A container upgraded mid-flight: the first 35 positions as history documents, the
    // last 35 in segments (10 in both: a replay across the upgrade).
    let mixed = segment_container(&cosmos, "mixed").await;
    write(&mixed, "drone-1", &history("drone-1", &sent[..35])).await;
    write(
        &mixed,
        "drone-1",
        &segments("drone-1", &sent[25..], STRETCH_MS),
    )
    .await;
    let (base, _stop) = serve(mixed, ApiOptions::default()).await;
    for limit in ["4", "12", "1000"] {
        let got = follow(&base, "drone-1", &query(&span, limit)).await;
        assert_eq!(got.sent, sent, "limit {limit}");
        assert!(
            got.calls.iter().all(|c| *c >= 2),
            "both formats asked: {:?}",
            got.calls
        );
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn a_span_over_the_limit_and_a_continuation_that_is_not_one_are_refused() {
    let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
    let c = segment_container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let (start, span) = start();
    write(
        &c,
        "drone-1",
        &segments("drone-1", &flight(30, start, 5_000, HOME), STRETCH_MS),
    )
    .await;
    let options = ApiOptions {
        track: fleet_api::TrackLimits {
            max_span: Duration::from_secs(2 * 3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let (base, _stop) = serve(c, options).await;
    let first = get(&format!(
        "{base}/api/drones/drone-1/track?since={}&limit=5",
        span[0].1.replace('+', "%2B")
    ))
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let token = first.body["properties"]["continuation"]
        .as_str()
        .unwrap()
        .to_string();
    let mut edited = token.clone().into_bytes();
    edited[10] = if edited[10] == b'A' { b'B' } else { b'A' };
    let edited = String::from_utf8(edited).unwrap();
    for (path, says) in [
        (
            "/api/drones/drone-1/track?since=3h".to_string(),
            "TRACK_MAX_SPAN (2h)",
        ),
        (
            "/api/drones/drone-1/track?since=5h&until=2h".to_string(),
            "TRACK_MAX_SPAN",
        ),
        (
            format!("/api/drones/drone-1/track?continuation={edited}"),
            "continuation",
        ),
        (
            format!("/api/drones/drone-2/track?continuation={token}"),
            "continuation",
        ),
        (
            "/api/drones/drone-1/track?limit=10001".to_string(),
            "TRACK_MAX_PAGE_LIMIT",
        ),
        (
            "/api/drones/drone-1/track?until=yesterday".to_string(),
            "until",
        ),
    ] {
        let got = get(&format!("{base}{path}")).await;
        assert_eq!(got.status, 400, "{path}: {}", got.body);
        let message = got.body["message"].as_str().unwrap();
        assert!(message.contains(says), "{path}: {message}");
        assert_eq!(got.calls, 0, "{path}: nothing asked of Cosmos DB");
    }
    let next = get(&format!(
        "{base}/api/drones/drone-1/track?continuation={token}&limit=5"
    ))
    .await;
    assert_eq!(next.status, 200, "{}", next.body);
    assert_eq!(
        next.body["properties"]["seq"],
        serde_json::json!([6, 7, 8, 9, 10])
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn each_page_is_charged_to_the_callers_budget() {
    let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
    let c = segment_container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let (start, span) = start();
    write(
        &c,
        "drone-1",
        &segments("drone-1", &flight(60, start, 5_000, HOME), STRETCH_MS),
    )
    .await;
    // 0.1 RU/s: a page's charge leaves the caller in debt for many seconds.
    let options = ApiOptions {
        ru_per_sec_per_identity: RuBudget::PerSec(0.1),
        ..Default::default()
    };
    let (base, _stop) = serve(c, options).await;
    let url = url::Url::parse_with_params(
        &format!("{base}/api/drones/drone-1/track"),
        &query(&span, "10"),
    )
    .unwrap();
    let first = get(url.as_str()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(
        first.charge > 1.0,
        "a page of segments costs RU: {}",
        first.charge
    );
    let token = first.body["properties"]["continuation"].as_str().unwrap();
    let next = get(&format!(
        "{base}/api/drones/drone-1/track?continuation={token}"
    ))
    .await;
    assert_eq!(next.status, 429, "{}", next.body);
    assert_eq!(next.body["error"], "over_budget");
    assert_eq!(next.calls, 0);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_track_read_from_segments_costs_less_than_from_history_documents() {
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let c = segment_container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let now = Utc::now().timestamp_millis();
    let start = (now - 70 * 60_000).div_euclid(300_000) * 300_000;
    // An hour 5 s apart: 720 positions, in 5-minute segments (60 each) or one a document.
    let sent = flight(720, start, 5_000, HOME);
    write(&c, "drone-s", &segments("drone-s", &sent, 300_000)).await;
    write(&c, "drone-h", &history("drone-h", &sent)).await;
    let (base, _stop) = serve(c, ApiOptions::default()).await;
    let span = [
        (
            "since",
            DateTime::<Utc>::from_timestamp_millis(start)
                .unwrap()
                .to_rfc3339(),
        ),
        (
            "until",
            DateTime::<Utc>::from_timestamp_millis(now)
                .unwrap()
                .to_rfc3339(),
        ),
    ];
    for limit in ["1000", "100"] {
        let mut ru = Vec::new();
        for drone in ["drone-s", "drone-h"] {
            let got = follow(&base, drone, &query(&span, limit)).await;
            assert_eq!(got.sent, sent, "{drone}, limit {limit}");
            let (charge, calls) = (
                got.charges.iter().sum::<f64>(),
                got.calls.iter().sum::<u32>(),
            );
            eprintln!(
                "{drone}: pages of {limit}: {} pages, {charge:.2} RU, {calls} calls, {:.4} RU a position",
                got.pages.len(),
                charge / sent.len() as f64
            );
            ru.push(charge);
        }
        assert!(
            ru[0] < ru[1],
            "segments {} RU, history documents {} RU",
            ru[0],
            ru[1]
        );
    }
    sim.shutdown().await;
}

//! End to end in-process: a harness-started Mosquitto, the writer, the local Cosmos endpoint.

mod common;

use std::time::Duration;

use chrono::Utc;
use common::*;
use cosmos_sim::CosmosSim;
use test_harness::Mosquitto;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_messages_keep_the_newest_position_of_each_drone() {
    let broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::builder()
        .partitions(4)
        .ru_per_sec(f64::INFINITY)
        .start()
        .await
        .unwrap();
    let writer = start_writer(settings(&sim.endpoint(), &broker.url(), "fifty")).await;

    let s = scenario(5_000, 10, Utc::now());
    assert_eq!(s.messages.len(), 50_000);
    publish(broker.port(), "fleet-fifty", &s.messages).await;

    let total = s.messages.len() as u64;
    let counts = wait_until(
        "every message to have a final outcome",
        Duration::from_secs(60),
        || writer.counts(),
        |c| c.received == total && c.finished() == total && c.in_flight == 0,
    )
    .await;
    assert_eq!(
        counts.written + counts.dropped("superseded"),
        s.fresh,
        "{counts:?}"
    );
    assert_eq!(counts.dropped("stale"), s.stale);
    assert_eq!(counts.dropped("invalid"), s.invalid);
    assert_eq!(counts.dropped("spoofed"), s.spoofed);
    assert_eq!(counts.dropped("write_failed"), 0);
    assert!(writer.metrics().invalid_count("json") > 0);
    assert!(writer.metrics().invalid_count("latitude") > 0);

    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "fifty")).await;
    assert_newest(&docs, &s.expected);
    for doc in docs.values() {
        assert_eq!(doc["kind"], "latest");
        assert!(doc["deviceId"].is_string(), "partition key carried");
    }

    // The metrics endpoint shows what happened.
    let addr = writer.metrics_addr().unwrap();
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(&format!("cloud_writer_messages_received_total {total}")),
        "{text}"
    );
    assert!(
        text.contains("cloud_writer_cosmos_request_units_total{range="),
        "{text}"
    );
    assert!(text.contains("cloud_writer_lateness_enqueued_to_written_seconds_bucket"));
    assert_eq!(
        reqwest::get(format!("http://{addr}/readyz"))
            .await
            .unwrap()
            .status(),
        200
    );

    writer.shutdown();
    writer.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restart_mid_stream_loses_nothing() {
    let mut broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::builder()
        .ru_per_sec(f64::INFINITY)
        .start()
        .await
        .unwrap();
    let writer = start_writer(settings(&sim.endpoint(), &broker.url(), "restart")).await;

    let s = scenario(1_000, 6, Utc::now());
    let (first, second) = s.messages.split_at(s.messages.len() / 2);
    publish(broker.port(), "fleet-restart-1", first).await;
    wait_until(
        "some writes",
        Duration::from_secs(30),
        || writer.counts().written,
        |w| *w > 0,
    )
    .await;
    broker.restart().unwrap();
    publish(broker.port(), "fleet-restart-2", second).await;

    let total = s.messages.len() as u64;
    let counts = wait_until(
        "every message to have a final outcome after the restart",
        Duration::from_secs(60),
        || writer.counts(),
        // Messages unacknowledged at the restart come again: at least every message.
        |c| c.finished() >= total && c.in_flight == 0 && latest_total(c) >= s.fresh,
    )
    .await;
    assert_eq!(counts.dropped("write_failed"), 0);
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "restart")).await;
    assert_newest(&docs, &s.expected);
    writer.shutdown();
    writer.wait().await.unwrap();
}

fn latest_total(c: &cloud_writer::Counts) -> u64 {
    c.written + c.dropped("superseded")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ru_budget_far_below_the_offered_rate_throttles_per_range_but_loses_nothing() {
    let broker = Mosquitto::start().unwrap();
    // 2 ranges of 400 RU/s: about 100 writes per second against 2,000 offered at once.
    let sim = CosmosSim::builder()
        .partitions(2)
        .ru_per_sec(800.0)
        .start()
        .await
        .unwrap();
    let writer = start_writer(settings(&sim.endpoint(), &broker.url(), "budget")).await;

    let now = Utc::now();
    let messages: Vec<Publish> = (0..1_500)
        .map(|d| Publish {
            device: device(d),
            payload: wire(&device(d), 1, now, 10.0, 20.0),
        })
        .collect();
    publish(broker.port(), "fleet-budget", &messages).await;
    let counts = wait_until(
        "every position written despite throttling",
        Duration::from_secs(90),
        || writer.counts(),
        |c| c.written == 1_500 && c.in_flight == 0,
    )
    .await;
    assert_eq!(counts.dropped("stale"), 0);
    assert_eq!(counts.dropped("write_failed"), 0);
    let text = writer.metrics().render();
    let throttled_ranges = text
        .lines()
        .filter(|l| {
            l.starts_with("cloud_writer_cosmos_throttled_total{range=") && !l.ends_with(" 0")
        })
        .count();
    assert!(
        throttled_ranges >= 1,
        "429s per range in the metrics:\n{text}"
    );
    // Lateness rose well above an unthrottled write's.
    let slow = text
        .lines()
        .find(|l| {
            l.starts_with("cloud_writer_lateness_enqueued_to_written_seconds_bucket{le=\"1.5\"}")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .unwrap();
    assert!(
        slow < 1_500,
        "some positions took longer than 1.5 s:\n{text}"
    );
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "budget")).await;
    assert_eq!(docs.len(), 1_500);
    writer.shutdown();
    writer.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_mode_writes_every_fresh_position_with_its_ttl() {
    let broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::builder()
        .ru_per_sec(f64::INFINITY)
        .start()
        .await
        .unwrap();
    let mut settings = settings(&sim.endpoint(), &broker.url(), "history");
    settings.history = Some(true);
    settings.history_ttl = Some("1h".parse().unwrap());
    let writer = start_writer(settings).await;

    let s = scenario(50, 4, Utc::now());
    publish(broker.port(), "fleet-history", &s.messages).await;
    let counts = wait_until(
        "history written",
        Duration::from_secs(30),
        || writer.counts(),
        |c| c.finished() == s.messages.len() as u64 && c.in_flight == 0,
    )
    .await;
    assert_eq!(counts.history_written, s.fresh);
    let container = container(&sim.endpoint(), "telemetry", "history");
    let query = cosmos::QueryRequest {
        query: "SELECT * FROM c WHERE c.kind = 'history'".into(),
        parameters: vec![],
    };
    let history = container
        .query(&query, cosmos::QueryScope::AllRanges)
        .await
        .unwrap();
    assert_eq!(history.documents.len() as u64, s.fresh);
    assert!(history.documents.iter().all(|d| d["ttl"] == 3600));
    assert_newest(&latest_documents(&container).await, &s.expected);
    writer.shutdown();
    writer.wait().await.unwrap();
}

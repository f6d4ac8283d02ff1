//! End to end in-process: a harness-started Mosquitto, the writer, the local Cosmos endpoint.

mod common;

use std::time::Duration;

use chrono::Utc;
use cloud_writer::DropReason;
use cloud_writer::internals::{MqttSettings, MqttSource};
use common::*;
use cosmos_sim::CosmosSim;
use telemetry::wire::InvalidReason;
use test_harness::{Mosquitto, MosquittoConfig, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_messages_keep_the_newest_position_of_each_drone() {
    let broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    let writer = start_writer(settings(&sim.endpoint(), &broker.url(), "fifty")).await;

    let s = scenario(5_000, 10, Utc::now());
    assert_eq!(s.messages.len(), 50_000);
    publish(broker.port(), "fleet-fifty", &s.messages).await;

    let total = s.messages.len() as u64;
    let counts = wait_received_final(&writer, total).await;
    assert_eq!(
        counts.written + counts.dropped(DropReason::Superseded),
        s.fresh,
        "{counts:?}"
    );
    assert_eq!(counts.dropped(DropReason::Stale), s.stale);
    assert_eq!(counts.dropped(DropReason::Invalid), s.invalid);
    assert_eq!(counts.dropped(DropReason::Spoofed), s.spoofed);
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0);
    assert!(counts.invalid[&InvalidReason::Json] > 0, "{counts:?}");
    assert!(counts.invalid[&InvalidReason::Latitude] > 0, "{counts:?}");
    assert_eq!(counts.invalid.values().sum::<u64>(), s.invalid);

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
        reqwest::get(format!("http://{}/readyz", writer.probe_addr().unwrap()))
            .await
            .unwrap()
            .status(),
        200
    );

    writer.shutdown();
    writer.wait().await.unwrap();
}

/// A broker restart while the writer has messages unacknowledged: they come again, and
/// nothing is lost. Redelivered messages are counted again, so the counts cannot say
/// when everything is written: the test waits until the container holds every drone's
/// newest position, which a lost message would keep it from ever doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restart_mid_stream_loses_nothing() {
    let mut broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    let writer = start_writer(settings(&sim.endpoint(), &broker.url(), "restart")).await;

    let s = scenario(1_000, 6, Utc::now());
    let (first, second) = s.messages.split_at(s.messages.len() / 2);
    publish(broker.port(), "fleet-restart-1", first).await;
    eventually(
        "some writes",
        Duration::from_secs(30),
        async || writer.counts().written,
        |w| *w > 0,
    )
    .await;
    broker.restart().unwrap();
    publish(broker.port(), "fleet-restart-2", second).await;

    let container = container(&sim.endpoint(), "telemetry", "restart");
    eventually(
        "every drone's newest position in the container after the restart",
        Duration::from_secs(90),
        || latest_documents(&container),
        |docs| newest_written(docs, &s.expected),
    )
    .await;
    let counts = eventually(
        "nothing in flight",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| c.in_flight == 0,
    )
    .await;
    assert!(counts.finished() >= s.messages.len() as u64, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0);
    assert_newest(&latest_documents(&container).await, &s.expected);
    writer.shutdown();
    writer.wait().await.unwrap();
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
    let counts = eventually(
        "every position written despite throttling",
        Duration::from_secs(90),
        async || writer.counts(),
        |c| c.written == 1_500 && c.in_flight == 0,
    )
    .await;
    assert_eq!(counts.dropped(DropReason::Stale), 0);
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0);
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
async fn history_mode_keeps_every_fresh_position_in_segments_with_its_ttl() {
    let broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    let mut settings = settings(&sim.endpoint(), &broker.url(), "history");
    settings.history = Some(true);
    settings.history_ttl = Some("1h".parse().unwrap());
    settings.history_hold = Some("1s".parse().unwrap());
    let writer = start_writer(settings).await;

    let s = scenario(50, 4, Utc::now());
    publish(broker.port(), "fleet-history", &s.messages).await;
    let counts = eventually(
        "history written",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| {
            c.finished() == s.messages.len() as u64
                && c.in_flight == 0
                && c.history_written >= s.fresh
        },
    )
    .await;
    assert_eq!(counts.history_written, s.fresh);
    let container = container(&sim.endpoint(), "telemetry", "history");
    let query = cosmos::QueryRequest {
        query: "SELECT * FROM c WHERE c.kind = 'segment'".into(),
        parameters: vec![],
    };
    let history = container
        .query(&query, cosmos::QueryScope::AllRanges)
        .await
        .unwrap();
    // Every fresh position once: (drone, seq) pairs are unique and as many as written.
    let mut kept = std::collections::BTreeSet::new();
    for doc in &history.documents {
        for point in telemetry::document::stored_points(doc).unwrap() {
            assert!(
                kept.insert((doc["deviceId"].to_string(), point.seq)),
                "{doc}"
            );
        }
    }
    assert_eq!(kept.len() as u64, s.fresh);
    assert!(history.documents.iter().all(|d| d["ttl"] == 3600));
    assert_newest(&latest_documents(&container).await, &s.expected);
    writer.shutdown();
    writer.wait().await.unwrap();
}

/// A Cosmos DB that answers nothing for two keep-alive periods while the pipeline is
/// full, behind a broker whose own in-flight window is unlimited: the writer's Receive
/// Maximum bounds what the broker sends, so the source keeps servicing the connection
/// (pings and PUBACKs flow, no reconnect, nothing delivered twice), never holds more
/// unacknowledged messages than it announced, the queue between source and pipeline
/// never holds more than its byte budget, nothing is acknowledged before it is written,
/// and everything is written once Cosmos DB answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_sink_keeps_the_session_and_the_queue_within_its_byte_budget() {
    // Mosquitto's own window off (0): only the writer's Receive Maximum limits it.
    let broker = MosquittoConfig::default()
        .max_inflight_messages(0)
        .start()
        .unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    let budget = cloud_writer::internals::SOURCE_MAX_BYTES_FLOOR;
    let mut settings = settings(&sim.endpoint(), &broker.url(), "blocked");
    settings.source_max_bytes = Some(budget);
    settings.max_in_flight = Some(20);
    settings.batch_max_messages = Some(20);
    // More than the queue and the pipeline hold, so that messages wait in the source.
    let receive_maximum = 400;
    settings.mqtt_receive_maximum = Some(receive_maximum);
    // The shortest rumqttc takes; the broker drops a client silent for 1.5 of it.
    let keep_alive = Duration::from_secs(5);
    let config = settings.resolve().unwrap();
    let url = url::Url::parse(&broker.url()).unwrap();
    let mqtt = MqttSettings {
        keep_alive,
        receive_maximum: config.mqtt_receive_maximum,
        ..MqttSettings::from_url(&url, "writer-blocked".into(), None, &Default::default()).unwrap()
    };
    let writer = cloud_writer::Writer::start_with(config, move |metrics| {
        Ok(Box::new(MqttSource::new(mqtt, metrics)))
    })
    .await
    .unwrap();
    wait_subscribed(&writer).await;

    // Every write arriving from now on waits two keep-alive periods (as long as the
    // writer's request timeout: a held write ends one way or the other by then).
    let stall = keep_alive * 2;
    sim.set_latency(stall);
    let stalled_since = std::time::Instant::now();
    let now = Utc::now();
    let total = 1_500;
    let messages: Vec<Publish> = (0..total)
        .map(|d| Publish {
            device: device(d),
            payload: wire(&device(d), 1, now, 10.0, 20.0),
        })
        .collect();
    publish(broker.port(), "fleet-blocked", &messages).await;
    // Once the Receive Maximum is used up and a write is held, new writes go through at
    // once; the held ones finish their stall, so nothing is written before `stall`.
    let gauges = || {
        let (received, unacknowledged) = mqtt_acknowledgements(&writer);
        (received, unacknowledged, sim.delayed_requests())
    };
    let mut most_unacknowledged = 0;
    eventually(
        "the Receive Maximum to be used up and a write to be held",
        Duration::from_secs(30),
        async || gauges(),
        |&(received, unacknowledged, delayed)| {
            if received == unacknowledged {
                most_unacknowledged = most_unacknowledged.max(unacknowledged);
            }
            received >= u64::from(receive_maximum) && delayed > 0
        },
    )
    .await;
    sim.set_latency(Duration::ZERO);
    // While nothing is acknowledged (the oldest positions are in the held writes), the
    // broker holds back beyond the Receive Maximum. (Once acknowledgements flow with a
    // backlog queued, Debian 12's Mosquitto 2.0.11 lets more in: its bug, fixed in 2.0.13.)
    eventually(
        "the first acknowledgement",
        Duration::from_secs(30),
        async || gauges(),
        |&(received, unacknowledged, _)| {
            if received == unacknowledged {
                most_unacknowledged = most_unacknowledged.max(unacknowledged);
            }
            received > unacknowledged
        },
    )
    .await;
    assert!(
        most_unacknowledged <= u64::from(receive_maximum),
        "{most_unacknowledged} unacknowledged, over the Receive Maximum {receive_maximum}"
    );
    assert!(
        most_unacknowledged > u64::from(receive_maximum) / 2,
        "the window never filled: {most_unacknowledged}"
    );

    // Until everything is written, sample what was acknowledged (received, less the
    // acknowledgement lag) against what has an outcome.
    let total = total as u64;
    let mut early = Vec::new();
    let counts = eventually(
        "every position written after the stall",
        Duration::from_secs(90),
        async || {
            let (received, lag, _) = gauges();
            let counts = writer.counts();
            let acknowledged = received.saturating_sub(lag);
            if acknowledged > counts.finished() {
                early.push((acknowledged, counts.clone()));
            }
            counts
        },
        |c| c.finished() == total && c.in_flight == 0,
    )
    .await;
    // A held write the client timed out and sent again finds its position there already.
    assert_eq!(
        counts.written + counts.dropped(DropReason::Superseded),
        total,
        "{counts:?}"
    );
    // Held longer than the broker waits for a silent client (1.5 keep-alive periods).
    assert!(
        stalled_since.elapsed() > keep_alive * 3 / 2,
        "written after {:?}: the stall did not hold the writer",
        stalled_since.elapsed()
    );
    // Delivered once each: the session was never dropped.
    let log = broker.log();
    assert_eq!(
        log.matches("as writer-blocked").count(),
        1,
        "the writer connected more than once:\n{log}"
    );
    assert!(!log.contains("exceeded timeout"), "{log}");
    assert_eq!(counts.received, total, "{counts:?}");
    // (A reconnect forgets the lag, which is why this is checked after.)
    assert!(early.is_empty(), "acknowledged before written: {early:?}");
    // The queue filled, and never beyond its budget.
    let text = writer.metrics().render();
    let peak = gauge(&text, "cloud_writer_source_queue_bytes_peak");
    assert!(
        peak <= budget as u64,
        "peak {peak} over the budget {budget}"
    );
    assert!(
        peak > budget as u64 / 2,
        "the queue never filled: peak {peak}"
    );
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "blocked")).await;
    assert_eq!(docs.len() as u64, total);
    writer.shutdown();
    writer.wait().await.unwrap();
}

/// The value of an unlabelled or fully labelled gauge line `name value`.
fn gauge(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

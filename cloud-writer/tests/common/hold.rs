//! Holding the stream, as every hold test checks it: a first round written, then a
//! refusal that would hit every write while a second, newer round is published; the writer
//! holds (not ready, the reason in its metrics, nothing written or acknowledged while held,
//! the broker keeping what is unacknowledged), and after the cure every message is final
//! with only the messages' own drops.

use std::net::SocketAddr;
use std::time::Duration;
use test_harness::eventually;

use chrono::{TimeDelta, Utc};
use cloud_writer::{Counts, DropReason, HoldReason, Writer};
use cosmos_sim::CosmosSim;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use test_harness::Mosquitto;

use super::{Scenario, mqtt_acknowledgements, publish, scenario, wait_final};

/// Publishes `s` and waits until each of its messages has a final outcome (on top of
/// `before` finished ones).
pub async fn publish_and_finish(
    writer: &Writer,
    broker: &Mosquitto,
    client: &str,
    s: &Scenario,
    before: u64,
) -> Counts {
    publish(broker.port(), client, &s.messages).await;
    wait_final(writer, before + s.messages.len() as u64).await
}

pub async fn readyz(addr: SocketAddr) -> u16 {
    reqwest::get(format!("http://{addr}/readyz"))
        .await
        .unwrap()
        .status()
        .as_u16()
}

pub async fn metrics_text(addr: SocketAddr) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Waits until the writer holds the stream for `reason`, then checks what holding means:
/// not ready, the reason in the metrics, positions in flight (not acknowledged) and no
/// more written while held.
pub async fn assert_held(writer: &Writer, sim: &CosmosSim, reason: HoldReason) -> Counts {
    eventually(
        "the writer to hold the stream",
        Duration::from_secs(30),
        async || writer.metrics().blocked(),
        |b| *b == Some(reason),
    )
    .await;
    assert_eq!(readyz(writer.probe_addr().unwrap()).await, 503);
    let text = metrics_text(writer.metrics_addr().unwrap()).await;
    assert!(
        text.contains(&format!(
            "cloud_writer_writer_blocked{{reason=\"{reason}\"}} 1"
        )),
        "{text}"
    );
    let held = writer.counts();
    assert!(held.in_flight > 0, "{held:?}");
    // Nothing is written while held, however often the writer probes.
    wait_probed_again(sim).await;
    let later = writer.counts();
    assert_eq!(later.written, held.written, "written while held: {later:?}");
    // (The pipeline still judges a batch it had taken: invalid, spoofed, late and
    // coalesced-away messages are counted, their acknowledgements wait in order.)
    for reason in [
        DropReason::WriteFailed,
        DropReason::StaleInRetry,
        DropReason::DocumentRefused,
    ] {
        assert_eq!(
            later.dropped(reason),
            held.dropped(reason),
            "{reason}: {later:?}"
        );
    }
    assert!(later.in_flight > 0, "{later:?}");
    held
}

/// Waits until the writer, holding the stream, has sent `sim` at least two more requests
/// (its probes).
pub async fn wait_probed_again(sim: &CosmosSim) {
    let requests = sim.stats().requests;
    eventually(
        "the writer to probe again",
        Duration::from_secs(20),
        async || sim.stats().requests,
        |r| *r >= requests + 2,
    )
    .await;
}

/// The acknowledged messages of the writer's MQTT connection, at most: received, less
/// those not yet acknowledged.
fn acknowledged(writer: &Writer) -> u64 {
    let (received, unacknowledged) = mqtt_acknowledgements(writer);
    received.saturating_sub(unacknowledged)
}

/// While the stream is held with every message of `total` published: the writer has
/// acknowledged no message without a final outcome, and the broker keeps at least every
/// message without one in its store, as Mosquitto reports it under `$SYS` (every 10 s;
/// the count also holds the broker's few dozen retained `$SYS` messages).
async fn assert_broker_keeps_the_unacknowledged(writer: &Writer, broker: &Mosquitto, total: u64) {
    let unfinished = total - writer.counts().finished();
    assert!(unfinished > 100, "too few held to tell: {unfinished}");
    let mut options = MqttOptions::new("sys-reader", "127.0.0.1", broker.port());
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    client
        .subscribe("$SYS/broker/store/messages/count", QoS::AtMostOnce)
        .await
        .unwrap();
    let mut stored = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while stored < unfinished {
        let Ok(event) = tokio::time::timeout_at(deadline, eventloop.poll()).await else {
            panic!("the broker stores {stored} messages; the writer has {unfinished} unfinished");
        };
        let event = event.expect("$SYS subscription");
        if let Event::Incoming(Packet::Publish(p)) = event {
            stored = std::str::from_utf8(&p.payload).unwrap().parse().unwrap();
        }
        // Acknowledged first, outcomes after: both only grow, so a message finished and
        // acknowledged between the two reads cannot look acknowledged before its outcome.
        let acknowledged = acknowledged(writer);
        let counts = writer.counts();
        assert!(
            acknowledged <= counts.finished(),
            "{acknowledged} acknowledged before their outcome while held: {counts:?}"
        );
        assert!(writer.metrics().blocked().is_some(), "the hold ended");
    }
    let _ = client.disconnect().await;
}

/// Runs a first fleet round through the writer, then `refuse`s: a second, newer round is
/// published while the writer must hold the stream for `reason`. Then `cure`s and waits
/// until every message is final: nothing failed, nothing turned stale, the writer ready.
/// Returns both rounds.
pub async fn hold_mid_stream(
    writer: &Writer,
    broker: &Mosquitto,
    sim: &CosmosSim,
    reason: HoldReason,
    refuse: impl FnOnce(),
    cure: impl FnOnce(),
) -> (Scenario, Scenario) {
    let now = Utc::now();
    let first = scenario(200, 3, now - TimeDelta::seconds(30));
    let counts = publish_and_finish(writer, broker, "fleet-1", &first, 0).await;
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0, "{counts:?}");

    refuse();
    let second = scenario(200, 3, now);
    let before = counts.finished();
    let publisher = {
        let messages = second.messages.clone();
        let port = broker.port();
        tokio::spawn(async move { publish(port, "fleet-2", &messages).await })
    };
    let held = assert_held(writer, sim, reason).await;
    assert!(held.finished() < before + second.messages.len() as u64);
    // Everything is published while held: the broker keeps what is not acknowledged.
    publisher.await.unwrap();
    assert_broker_keeps_the_unacknowledged(writer, broker, before + second.messages.len() as u64)
        .await;

    cure();
    let counts = wait_final(writer, before + second.messages.len() as u64).await;
    assert_eq!(writer.metrics().blocked(), None);
    assert!(writer.metrics().is_ready());
    // The only drops are the messages' own (and positions superseded by newer ones).
    let own = [
        (DropReason::Stale, first.stale + second.stale),
        (DropReason::Invalid, first.invalid + second.invalid),
        (DropReason::Spoofed, first.spoofed + second.spoofed),
    ];
    for (reason, expected) in own {
        assert_eq!(counts.dropped(reason), expected, "{reason}: {counts:?}");
    }
    let superseded = counts.dropped(DropReason::Superseded);
    assert_eq!(
        counts.finished(),
        counts.written + superseded + own.iter().map(|(_, n)| n).sum::<u64>(),
        "dropped for another reason: {counts:?}"
    );
    (first, second)
}

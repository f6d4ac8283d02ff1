//! The embedded broker carries QoS 1 traffic, and the load generator publishes exactly its
//! budget of valid wire messages through it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fleet::{Broker, BrokerKind};
use fleet::{LoadgenConfig, Target};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

/// A client connected and subscribed to `filter` at QoS 1 (SUBACK received).
async fn subscriber(broker: &Broker, id: &str, filter: &str) -> (AsyncClient, EventLoop) {
    let mut options = MqttOptions::new(id, "127.0.0.1", broker.addr().port());
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut events) = AsyncClient::new(options, 100);
    client.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
    timeout(WAIT, async {
        loop {
            if let Event::Incoming(Packet::SubAck(_)) = events.poll().await.unwrap() {
                return;
            }
        }
    })
    .await
    .expect("no SUBACK");
    (client, events)
}

#[tokio::test]
async fn embedded_broker_delivers_qos1_publications() {
    let broker = tokio::task::spawn_blocking(|| Broker::start(BrokerKind::Embedded))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(broker.url(), format!("mqtt://{}", broker.addr()));
    let (_sub, mut sub_events) = subscriber(&broker, "reader", "devices/+/messages/events/").await;

    let options = MqttOptions::new("drone-1", "127.0.0.1", broker.addr().port());
    let (publisher, mut pub_events) = AsyncClient::new(options, 10);
    publisher
        .publish(
            "devices/drone-1/messages/events/",
            QoS::AtLeastOnce,
            false,
            b"hello".to_vec(),
        )
        .await
        .unwrap();
    let acked = tokio::spawn(async move {
        loop {
            if let Event::Incoming(Packet::PubAck(_)) = pub_events.poll().await.unwrap() {
                return;
            }
        }
    });
    let received = timeout(WAIT, async {
        loop {
            if let Event::Incoming(Packet::Publish(p)) = sub_events.poll().await.unwrap() {
                return p;
            }
        }
    })
    .await
    .expect("subscriber got nothing");
    assert_eq!(received.topic, "devices/drone-1/messages/events/");
    assert_eq!(&received.payload[..], b"hello");
    assert_eq!(received.qos, QoS::AtLeastOnce);
    timeout(WAIT, acked).await.expect("no PUBACK").unwrap();
}

#[tokio::test]
async fn loadgen_publishes_its_count_of_valid_positions_from_every_drone() {
    let broker = tokio::task::spawn_blocking(|| Broker::start(BrokerKind::Embedded))
        .await
        .unwrap()
        .unwrap();
    let (_sub, mut events) = subscriber(&broker, "reader", "devices/+/messages/events/#").await;
    let config = LoadgenConfig {
        target: Target::Mqtt {
            host: "127.0.0.1".to_owned(),
            port: broker.addr().port(),
        },
        drones: 20,
        rate: 400.0,
        count: Some(200),
        duration: Duration::from_secs(30),
        ..LoadgenConfig::default()
    };
    let report = fleet::run_loadgen(config, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.sent, 200);
    assert_eq!(report.acked, 200);
    assert!(report.acked_per_sec > 0.0);
    let p50 = report.publish_latency_p50.expect("latencies recorded");
    let p99 = report.publish_latency_p99.unwrap();
    assert!(p50 <= p99);

    let mut seqs: HashMap<String, HashSet<u64>> = HashMap::new();
    timeout(WAIT, async {
        let mut n = 0;
        while n < 200 {
            if let Event::Incoming(Packet::Publish(p)) = events.poll().await.unwrap() {
                let pos = telemetry::wire::decode(&p.payload).expect("a valid wire message");
                // IoT Hub's topic: the device's events, then the property bag.
                let prefix = format!("devices/{}/messages/events/$.ct=", pos.device_id);
                assert!(p.topic.starts_with(&prefix), "{}", p.topic);
                seqs.entry(pos.device_id).or_default().insert(pos.seq);
                n += 1;
            }
        }
    })
    .await
    .expect("subscriber did not get all 200 messages");
    assert_eq!(seqs.len(), 20, "every drone published");
    let mut total = 0;
    for (id, seq) in &seqs {
        // Each drone numbers its positions 1, 2, 3, ... without gaps; the budget is shared,
        // spread over the drones' interleaved ticks (about 10 each).
        let n = seq.len() as u64;
        assert!((5..=15).contains(&n), "{id}: {seq:?}");
        assert!((1..=n).all(|s| seq.contains(&s)), "{id}: {seq:?}");
        total += n;
    }
    assert_eq!(total, 200);
}

#[tokio::test]
async fn loadgen_stops_at_its_duration() {
    let broker = tokio::task::spawn_blocking(|| Broker::start(BrokerKind::Embedded))
        .await
        .unwrap()
        .unwrap();
    let config = LoadgenConfig {
        target: Target::Mqtt {
            host: "127.0.0.1".to_owned(),
            port: broker.addr().port(),
        },
        drones: 5,
        rate: 50.0,
        count: None,
        duration: Duration::from_millis(500),
        ..LoadgenConfig::default()
    };
    let report = timeout(WAIT, fleet::run_loadgen(config, CancellationToken::new()))
        .await
        .expect("the run is bounded by its duration")
        .unwrap();
    // 50 msg/s for 0.5 s, first publications at t = 0: at most 30 (allowing one tick of slack).
    assert!(report.sent > 0 && report.sent <= 30, "sent {}", report.sent);
    assert_eq!(report.acked, report.sent);
}

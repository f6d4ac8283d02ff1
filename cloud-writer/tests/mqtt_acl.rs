//! The Mosquitto ACL that `deploy/mosquitto/acl` ships: a device may publish only under
//! its own topic, so a device that claims another drone's topic never reaches the writer
//! (the writer's identity check trusts the topic). Broker, writer and local Cosmos
//! endpoint are real; the devices are MQTT clients with their own usernames.

mod common;

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use common::*;
use cosmos_sim::CosmosSim;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use test_harness::{MosquittoConfig, eventually, write_password_file};

/// Publishes `payload` to `topic` as `user` at QoS 1 and waits for the broker's PUBACK.
async fn publish_as(port: u16, user: &str, topic: &str, payload: Vec<u8>) {
    let mut options = MqttOptions::new(user, "127.0.0.1", port);
    options.set_credentials(user, format!("{user}-password"));
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    client
        .publish(topic, QoS::AtLeastOnce, false, payload)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::PubAck(_))) => break,
                Ok(_) => {}
                Err(err) => panic!("{user}: {err}"),
            }
        }
    })
    .await
    .expect("PUBACK");
    let _ = client.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_can_publish_only_under_its_own_topic() {
    let dir = tempfile::tempdir().unwrap();
    let passwords = dir.path().join("passwd");
    write_password_file(
        &passwords,
        &[
            ("cloud-writer", "cloud-writer-password"),
            ("drone-00001", "drone-00001-password"),
            ("drone-00002", "drone-00002-password"),
        ],
    )
    .unwrap();
    let acl = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/mosquitto/acl");
    let broker = MosquittoConfig::default()
        .access(&passwords, &acl)
        .start()
        .unwrap();
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let url = format!(
        "mqtt://cloud-writer:cloud-writer-password@127.0.0.1:{}",
        broker.port()
    );
    let writer = start_writer(settings(&sim.endpoint(), &url, "acl")).await;

    // drone-00001 publishes a position of drone-00002 under drone-00002's topic: the
    // payload matches the topic, so only the broker can stop it. Then its own position.
    let now = Utc::now();
    let (own, other) = (device(1), device(2));
    let spoof = wire(&other, 7, now, 47.6, -122.3);
    publish_as(
        broker.port(),
        &own,
        &format!("devices/{other}/messages/events/"),
        spoof,
    )
    .await;
    let mine = wire(&own, 1, now, 47.5, -122.2);
    publish_as(
        broker.port(),
        &own,
        &format!("devices/{own}/messages/events/"),
        mine,
    )
    .await;

    // The broker delivers one publisher's messages in order: once the own position is
    // written, the spoofed one would have been received before it.
    let counts = eventually(
        "the device's own position written",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| c.written >= 1 && c.in_flight == 0,
    )
    .await;
    assert_eq!(
        counts.received, 1,
        "the spoofed message reached the writer: {counts:?}"
    );
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "acl")).await;
    assert!(docs.contains_key(&own), "{docs:?}");
    assert!(!docs.contains_key(&other), "{docs:?}");

    // drone-00002 itself may publish under its own topic.
    let theirs = wire(&other, 8, now, 47.7, -122.4);
    publish_as(
        broker.port(),
        &other,
        &format!("devices/{other}/messages/events/"),
        theirs,
    )
    .await;
    eventually(
        "the other device's own position written",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| c.written >= 2 && c.in_flight == 0,
    )
    .await;
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "acl")).await;
    assert_eq!(docs[&other]["seq"], 8, "{docs:?}");
    writer.shutdown();
    writer.wait().await.unwrap();
}

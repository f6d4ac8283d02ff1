//! Shared helpers of the integration tests: message scenarios, an MQTT publisher, writer
//! settings, reading back the container, and waiting on conditions.
#![allow(dead_code)]

pub mod blobs;
pub mod checkpoints;
pub mod entra;
pub mod hold;
pub mod hub_rig;
pub mod replica;
pub mod segments;
pub mod sink;

use std::collections::HashMap;
use std::time::Duration;
use test_harness::eventually;

use chrono::{DateTime, Utc};
use cloud_writer::Secret;
use cloud_writer::Settings;
use cosmos::{
    ContainerClient, CosmosClient, CosmosConfig, Credential, MasterKey, QueryRequest, QueryScope,
};
use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};
use serde_json::Value;

/// The emulator's well-known key (the local endpoint's default; @vercel/cosmosdb-server
/// ignores signatures).
pub const KEY: &str = cosmos_wire::auth::EMULATOR_KEY;

/// One message to publish: the device whose topic it goes to, and the payload.
#[derive(Debug, Clone)]
pub struct Publish {
    pub device: String,
    pub payload: Vec<u8>,
}

/// Messages of a fleet and what the writer must make of them.
#[derive(Debug, Default)]
pub struct Scenario {
    pub messages: Vec<Publish>,
    /// Per drone, the newest fresh valid position: (deviceTimeMs, seq, lat, lon).
    pub expected: HashMap<String, (i64, u64, f64, f64)>,
    pub fresh: u64,
    pub stale: u64,
    pub invalid: u64,
    pub spoofed: u64,
}

pub fn device(d: usize) -> String {
    format!("drone-{d:05}")
}

pub fn wire(device: &str, seq: u64, ts: DateTime<Utc>, lat: f64, lon: f64) -> Vec<u8> {
    format!(
        r#"{{"v":1,"deviceId":"{device}","seq":{seq},"ts":"{}","lat":{lat},"lon":{lon},"altM":120.5,"speedMps":11.0,"batteryPct":80}}"#,
        ts.format("%Y-%m-%dT%H:%M:%S%.3fZ")
    )
    .into_bytes()
}

/// `drones` drones with `per_drone` positions each, 5 s apart ending at `now`. Per drone
/// the order is shuffled; every tenth drone sends newest first (an offline buffer
/// replayed). Some positions are stale (10 minutes old), invalid (bad JSON, latitude out
/// of range) or spoofed (another drone's id in the payload, on the newest position).
/// Messages of different drones are interleaved.
pub fn scenario(drones: usize, per_drone: u64, now: DateTime<Utc>) -> Scenario {
    let mut rng_state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        rng_state
    };
    let mut s = Scenario::default();
    let mut per_device: Vec<Vec<Publish>> = Vec::with_capacity(drones);
    for d in 0..drones {
        let id = device(d);
        let mut msgs = Vec::with_capacity(per_drone as usize);
        for seq in 1..=per_drone {
            let mut ts = now - chrono::TimeDelta::seconds(5 * (per_drone - seq) as i64);
            let lat = (d % 170) as f64 - 85.0 + seq as f64 * 0.001;
            let lon = (d % 350) as f64 - 175.0 + seq as f64 * 0.001;
            let payload = if d % 7 == 3 && seq == 1 {
                ts = now - chrono::TimeDelta::minutes(10);
                s.stale += 1;
                wire(&id, seq, ts, lat, lon)
            } else if d % 11 == 5 && seq == 2 {
                s.invalid += 1;
                b"{\"v\":1,\"deviceId\":".to_vec()
            } else if d % 13 == 6 && seq == 3 {
                s.invalid += 1;
                wire(&id, seq, ts, 123.0, lon)
            } else if d % 17 == 8 && seq == per_drone {
                s.spoofed += 1;
                wire(&device(d + 1), seq, ts, lat, lon)
            } else {
                s.fresh += 1;
                let key = (ts.timestamp_millis(), seq, lat, lon);
                let entry = s.expected.entry(id.clone()).or_insert(key);
                if (key.0, key.1) > (entry.0, entry.1) {
                    *entry = key;
                }
                wire(&id, seq, ts, lat, lon)
            };
            msgs.push(Publish {
                device: id.clone(),
                payload,
            });
        }
        if d % 10 == 0 {
            msgs.reverse();
        } else {
            for i in (1..msgs.len()).rev() {
                let j = (next() % (i as u64 + 1)) as usize;
                msgs.swap(i, j);
            }
        }
        per_device.push(msgs);
    }
    for round in 0..per_drone as usize {
        for msgs in &mut per_device {
            if let Some(m) = msgs.get(round) {
                s.messages.push(m.clone());
            }
        }
    }
    s
}

/// Publishes `messages` at QoS 1 to `devices/{device}/messages/events/` and waits for
/// every PUBACK.
pub async fn publish(port: u16, client_id: &str, messages: &[Publish]) {
    let mut options = MqttOptions::new(client_id, "127.0.0.1", port);
    options
        .set_keep_alive(Duration::from_secs(30))
        .set_inflight(1000)
        .set_max_packet_size(2 * 1024 * 1024, 2 * 1024 * 1024)
        .set_request_channel_capacity(10_000);
    let (client, mut eventloop) = AsyncClient::new(options, 10_000);
    let total = messages.len();
    let acks = tokio::spawn(async move {
        let mut acked = 0;
        while acked < total {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::PubAck(_))) => acked += 1,
                Ok(_) => {}
                Err(err) => panic!("publisher connection failed: {err}"),
            }
        }
        // Let the DISCONNECT go out.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_) => break,
                    _ => {}
                }
            }
        })
        .await;
    });
    for m in messages {
        let topic = format!("devices/{}/messages/events/", m.device);
        client
            .publish(topic, QoS::AtLeastOnce, false, m.payload.clone())
            .await
            .expect("publish request");
    }
    tokio::time::timeout(Duration::from_secs(120), async {
        let _ = client.disconnect().await;
        acks.await.expect("publisher task");
    })
    .await
    .expect("every message acknowledged by the broker");
}

/// Sends the writer's logs to the test output (shown for failing tests).
pub fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,cloud_writer=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Writer settings against a Cosmos endpoint and a broker (also starts test logs).
pub fn settings(endpoint: &str, mqtt_url: &str, container: &str) -> Settings {
    logs();
    Settings {
        cosmos_endpoint: Some(endpoint.parse().unwrap()),
        cosmos_key: Some(Secret::new(KEY)),
        cosmos_database: Some("telemetry".into()),
        cosmos_container: Some(container.into()),
        cosmos_create_if_missing: Some(true),
        writer_source: Some(Secret::new(mqtt_url)),
        mqtt_client_id: Some(format!("writer-{container}")),
        metrics_addr: Some("127.0.0.1:0".into()),
        probe_addr: Some("127.0.0.1:0".into()),
        ..Settings::default()
    }
}

/// A broker, the local endpoint (two ranges, no throttling) and the writer's settings
/// between them for `container`.
pub async fn broker_and_endpoint(
    container: &str,
) -> (test_harness::Mosquitto, cosmos_sim::CosmosSim, Settings) {
    let broker = test_harness::Mosquitto::start().unwrap();
    let sim = cosmos_sim::CosmosSim::builder()
        .partitions(2)
        .ru_per_sec(f64::INFINITY)
        .start()
        .await
        .unwrap();
    let settings = settings(&sim.endpoint(), &broker.url(), container);
    (broker, sim, settings)
}

/// A free port on 127.0.0.1 (for a writer process's metrics endpoint), never one this test
/// process handed out before: the listener that found it is closed before the writer binds
/// it, and the OS gave one port to two of `full_size.rs`'s eight writers once (the second
/// could not start, and scraping its port counted the first one's partitions twice).
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if HANDED_OUT.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// A client for a container.
pub fn container(endpoint: &str, database: &str, name: &str) -> ContainerClient {
    let key = MasterKey::from_base64(KEY).unwrap();
    let client = CosmosClient::new(CosmosConfig::new(
        endpoint.parse().unwrap(),
        Credential::MasterKey(key),
    ))
    .unwrap();
    client.container(database, name)
}

/// Every document of the container, by `deviceId` (latest documents only).
pub async fn latest_documents(container: &ContainerClient) -> HashMap<String, Value> {
    let query = QueryRequest {
        query: "SELECT * FROM c WHERE c.kind = 'latest'".into(),
        parameters: vec![],
    };
    let response = container
        .query(&query, QueryScope::AllRanges)
        .await
        .expect("query the container");
    response
        .documents
        .into_iter()
        .map(|d| (d["deviceId"].as_str().unwrap().to_string(), d))
        .collect()
}

/// The latest document of `device` in the container (which must hold one).
pub async fn stored(container: &ContainerClient, device: &str) -> Value {
    container
        .read(device, device)
        .await
        .unwrap()
        .expect("document exists")
        .json()
        .unwrap()
}

/// RU the endpoint charged `container` so far.
pub fn charged(sim: &cosmos_sim::CosmosSim, container: &str) -> f64 {
    sim.stats()
        .containers
        .iter()
        .filter(|c| c.container == container)
        .flat_map(|c| &c.partitions)
        .map(|p| p.ru_total)
        .sum()
}

/// Checks that the container holds exactly the expected newest position of each drone.
pub fn assert_newest(
    docs: &HashMap<String, Value>,
    expected: &HashMap<String, (i64, u64, f64, f64)>,
) {
    assert_eq!(docs.len(), expected.len(), "one document per drone");
    for (device, (time_ms, seq, lat, lon)) in expected {
        let doc = docs
            .get(device)
            .unwrap_or_else(|| panic!("no document for {device}"));
        assert_eq!(doc["id"], device.as_str());
        assert_eq!(doc["deviceTimeMs"], *time_ms, "{device}: {doc}");
        assert_eq!(doc["seq"], *seq, "{device}: {doc}");
        assert_eq!(doc["location"]["type"], "Point");
        assert_eq!(doc["location"]["coordinates"][0].as_f64(), Some(*lon));
        assert_eq!(doc["location"]["coordinates"][1].as_f64(), Some(*lat));
    }
}

/// Whether the container holds exactly the expected newest position of each drone.
pub fn newest_written(
    docs: &HashMap<String, Value>,
    expected: &HashMap<String, (i64, u64, f64, f64)>,
) -> bool {
    docs.len() == expected.len()
        && expected.iter().all(|(device, (time_ms, seq, _, _))| {
            docs.get(device)
                .is_some_and(|d| d["deviceTimeMs"] == *time_ms && d["seq"] == *seq)
        })
}

/// Starts a writer with these settings and waits until its MQTT subscription is acknowledged.
pub async fn start_writer(settings: Settings) -> cloud_writer::Writer {
    let writer = cloud_writer::Writer::start(settings.resolve().unwrap())
        .await
        .unwrap();
    wait_subscribed(&writer).await;
    writer
}

/// Waits until the writer's MQTT subscription is acknowledged.
pub async fn wait_subscribed(writer: &cloud_writer::Writer) {
    eventually(
        "writer subscribed",
        Duration::from_secs(10),
        async || writer.metrics().is_ready(),
        |r| *r,
    )
    .await;
}

/// The writer's MQTT connection as `(received, unacknowledged)`. Received is read
/// before the acknowledgement lag, and the source enters a message in the lag before it
/// counts it received: a message arriving between the two reads makes `received -
/// unacknowledged` smaller than what was acknowledged, never larger.
pub fn mqtt_acknowledgements(writer: &cloud_writer::Writer) -> (u64, u64) {
    let received = writer.counts().received;
    let text = writer.metrics().render();
    let unacknowledged = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("cloud_writer_checkpoint_lag{partition=\"mqtt\"} ")?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    (received, unacknowledged)
}

/// Waits until `total` messages have a final outcome and nothing is in flight.
pub async fn wait_final(writer: &cloud_writer::Writer, total: u64) -> cloud_writer::Counts {
    eventually(
        "every message to have a final outcome",
        Duration::from_secs(60),
        async || writer.counts(),
        |c| c.finished() == total && c.in_flight == 0,
    )
    .await
}

/// Waits until the writer has received `total` messages, each with a final outcome, and
/// nothing is in flight.
pub async fn wait_received_final(
    writer: &cloud_writer::Writer,
    total: u64,
) -> cloud_writer::Counts {
    eventually(
        "every message received to have a final outcome",
        Duration::from_secs(60),
        async || writer.counts(),
        |c| c.received == total && c.finished() == total && c.in_flight == 0,
    )
    .await
}

/// [`wait_received_final`], then checks that each message was written or superseded.
pub async fn wait_written(writer: &cloud_writer::Writer, total: u64) -> cloud_writer::Counts {
    let counts = wait_received_final(writer, total).await;
    assert_eq!(
        counts.written + counts.dropped(cloud_writer::DropReason::Superseded),
        total,
        "{counts:?}"
    );
    counts
}

/// The value of the first series starting with `name` (a metric name, with its labels if
/// it has any) on a writer process's metrics endpoint at `port`; `None` while it does not
/// answer.
pub async fn metric(port: u16, name: &str) -> Option<u64> {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
}

//! Throughput of the local IoT Hub: device messages accepted per second over MQTT/TLS (one
//! device, QoS 1, rumqttc, every PUBACK awaited).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hub_sim::sas::{make_token, now_secs};
use hub_sim::{HubConfig, HubSim};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS, TlsConfiguration, Transport};
use std::time::{Duration, Instant};

const MQTT_MESSAGES: u64 = 5_000;
const PAYLOAD: &[u8] = br#"{"v":1,"device":"drone-0001","seq":123456,"t":1732300000000,"lat":47.6062,"lon":-122.3321,"alt":120.5}"#;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn start(dir: &std::path::Path, devices: usize) -> HubSim {
    let mut config = HubConfig::new(dir);
    config.devices = devices;
    config.device_prefix = "bench-".into();
    HubSim::start(config).await.unwrap()
}

/// Publishes `n` QoS 1 messages from one device and waits for every PUBACK.
async fn publish(hub: &HubSim, n: u64) -> Duration {
    let line = std::fs::read_to_string(hub.config().state_dir.join("devices.txt")).unwrap();
    let key = line
        .trim()
        .rsplit("SharedAccessKey=")
        .next()
        .unwrap()
        .to_owned();
    let key = base64_decode(&key);
    let token = make_token("localhost/devices/bench-0", &key, now_secs() + 3600, None);
    let mut options = MqttOptions::new("bench-0", "localhost", hub.mqtt_addr().port());
    options.set_credentials("localhost/bench-0/?api-version=2021-04-12", token);
    options.set_keep_alive(Duration::from_secs(60));
    options.set_inflight(100);
    options.set_transport(Transport::tls_with_config(TlsConfiguration::Simple {
        ca: hub.ca_pem().as_bytes().to_vec(),
        alpn: None,
        client_auth: None,
    }));
    let (client, mut events) = AsyncClient::new(options, 1024);
    let started = Instant::now();
    let publisher = tokio::spawn(async move {
        for _ in 0..n {
            client
                .publish(
                    "devices/bench-0/messages/events/kind=position",
                    QoS::AtLeastOnce,
                    false,
                    PAYLOAD,
                )
                .await
                .unwrap();
        }
        client
    });
    let mut acked = 0;
    while acked < n {
        if let Event::Incoming(Packet::PubAck(_)) = events.poll().await.unwrap() {
            acked += 1;
        }
    }
    let elapsed = started.elapsed();
    publisher.await.unwrap().disconnect().await.ok();
    elapsed
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let hub = rt.block_on(start(dir.path(), 1));
    let mut group = c.benchmark_group("hub_sim");
    group.sample_size(10);
    group.throughput(Throughput::Elements(MQTT_MESSAGES));
    group.bench_function("mqtt_tls_messages_accepted", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| rt.block_on(publish(&hub, MQTT_MESSAGES)))
                .sum()
        })
    });
    group.finish();
    rt.block_on(hub.shutdown());
}

criterion_group!(benches, bench);
criterion_main!(benches);

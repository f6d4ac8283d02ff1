//! Throughput of the local IoT Hub: device messages accepted per second over MQTT/TLS (one
//! device, QoS 1, rumqttc, every PUBACK awaited), with the partitions in memory and kept in a
//! data directory (each PUBACK after the message is durable). Besides criterion's rate it
//! prints the whole process's CPU seconds per message (hub and device in this process).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
#[path = "common/cpu.rs"]
mod cpu;
#[path = "../tests/common/device.rs"]
mod device;

use cpu::process_cpu;
use device::device_options;
use hub_sim::DataDir;
use hub_sim::{HubConfig, HubSim};
use rumqttc::{AsyncClient, Event, Packet, QoS};
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

async fn start(dir: &std::path::Path, devices: usize, data_dir: bool) -> HubSim {
    let mut config = HubConfig::new(dir);
    if data_dir {
        config.data_dir = Some(DataDir::new(dir.join("data")));
    }
    config.devices = devices;
    config.device_prefix = "bench-".into();
    HubSim::start(config).await.unwrap()
}

/// Publishes `n` QoS 1 messages from one device and waits for every PUBACK.
async fn publish(hub: &HubSim, n: u64) -> Duration {
    let line = std::fs::read_to_string(hub.config().state_dir.join("devices.txt")).unwrap();
    let options = device_options(&line, hub.mqtt_addr().port(), hub.ca_pem().as_bytes(), 100);
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

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("hub_sim");
    group.sample_size(10);
    group.throughput(Throughput::Elements(MQTT_MESSAGES));
    for (name, data_dir) in [
        ("mqtt_tls_messages_accepted", false),
        ("mqtt_tls_messages_accepted_data_dir", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let hub = rt.block_on(start(dir.path(), 1, data_dir));
        let (mut wall, mut cpu, mut messages) = (Duration::ZERO, Duration::ZERO, 0);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let before = process_cpu();
                let elapsed = (0..iters)
                    .map(|_| rt.block_on(publish(&hub, MQTT_MESSAGES)))
                    .sum();
                cpu += process_cpu() - before;
                wall += elapsed;
                messages += iters * MQTT_MESSAGES;
                elapsed
            })
        });
        if messages > 0 {
            eprintln!(
                "{name}: {messages} messages, {:.0} msg/s, {:.2} µs CPU per message (whole process)",
                messages as f64 / wall.as_secs_f64(),
                cpu.as_secs_f64() * 1e6 / messages as f64
            );
        }
        rt.block_on(hub.shutdown());
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

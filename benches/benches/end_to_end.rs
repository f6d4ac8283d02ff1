//! End to end, in one process: positions published at QoS 1 to the embedded MQTT broker,
//! consumed by the real cloud writer (MQTT source, pipeline, bulk sink with conditional
//! patches), written to the local Cosmos endpoint (4 partitions, unthrottled, no added
//! latency). The figure is positions per second from the first PUBLISH until the writer
//! has a final outcome for the last one; broker, writer and endpoint share the machine's
//! cores.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use cloud_writer::DropReason;
use cloud_writer::Writer;
use cosmos_sim::CosmosSim;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fleet::DemoConfig;
use fleet::{Broker, BrokerKind};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};

/// Drones whose positions are published (each drone's document is patched in turn).
const DRONES: usize = 1_000;
/// Publishing connections.
const PUBLISHERS: usize = 8;
/// Positions per measured iteration.
const BATCH: usize = 4_000;

struct Setup {
    _broker: Broker,
    _sim: CosmosSim,
    writer: Writer,
    publishers: Vec<AsyncClient>,
    seq: AtomicU64,
}

async fn setup() -> Setup {
    let broker = tokio::task::spawn_blocking(|| Broker::start(BrokerKind::Embedded))
        .await
        .expect("broker start")
        .expect("the embedded broker starts");
    let sim = CosmosSim::unthrottled().await.expect("cosmos-sim starts");
    sim.create_container(fleet::DATABASE, fleet::CONTAINER, fleet::DEVICE_KEY)
        .expect("container");
    let config = DemoConfig {
        speedup: 1.0,
        ..DemoConfig::default()
    };
    let writer = Writer::start(fleet::writer_config(&config, &broker, &sim))
        .await
        .expect("the writer starts");
    assert!(
        fleet::wait_until_subscribed(&writer, Duration::from_secs(10)).await,
        "the writer subscribes"
    );
    let mut publishers = Vec::new();
    for i in 0..PUBLISHERS {
        let mut options = MqttOptions::new(format!("bench-{i}"), "127.0.0.1", broker.addr().port());
        options.set_keep_alive(Duration::from_secs(60));
        options.set_inflight(200);
        let (client, events) = AsyncClient::new(options, 1_000);
        tokio::spawn(drive(events));
        publishers.push(client);
    }
    Setup {
        _broker: broker,
        _sim: sim,
        writer,
        publishers,
        seq: AtomicU64::new(0),
    }
}

/// Polls a publisher's connection (PUBACKs) for as long as the bench runs.
async fn drive(mut events: EventLoop) {
    loop {
        match events.poll().await {
            Ok(Event::Incoming(Packet::Disconnect)) => return,
            Ok(_) => {}
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Publishes [`BATCH`] fresh positions spread over the publishers and drones, and waits
/// until the writer has settled them all.
async fn round(setup: &Setup) -> Duration {
    let target = setup.writer.counts().finished() + BATCH as u64;
    let start = Instant::now();
    for n in 0..BATCH {
        let seq = setup.seq.fetch_add(1, Ordering::Relaxed);
        let device = fleet::device_id(seq as usize % DRONES);
        let payload = telemetry::Position {
            device_id: device.clone(),
            seq,
            ts: Utc::now(),
            lat: 47.6 + (seq % 997) as f64 * 1e-5,
            lon: -122.3 + (seq % 991) as f64 * 1e-5,
            alt_m: Some(120.0),
            heading_deg: Some(90.0),
            speed_mps: Some(12.0),
            battery_pct: Some(80),
            gnss: Default::default(),
        }
        .encode()
        .expect("a valid position");
        setup.publishers[n % PUBLISHERS]
            .publish(
                format!("devices/{device}/messages/events/"),
                QoS::AtLeastOnce,
                false,
                payload,
            )
            .await
            .expect("publish queued");
    }
    let mut poll = tokio::time::interval(Duration::from_millis(1));
    let deadline = start + Duration::from_secs(60);
    while setup.writer.counts().finished() < target {
        assert!(
            Instant::now() < deadline,
            "the writer did not settle the round in 60 s"
        );
        poll.tick().await;
    }
    start.elapsed()
}

fn end_to_end(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let setup = Arc::new(rt.block_on(setup()));
    let mut group = c.benchmark_group("end_to_end");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    group.bench_function("embedded_broker_writer_sim", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let setup = setup.clone();
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += round(&setup).await;
                }
                total
            }
        });
    });
    group.finish();
    let counts = setup.writer.counts();
    assert_eq!(
        counts.dropped(DropReason::Stale),
        0,
        "positions turned stale: {counts:?}"
    );
}

criterion_group!(benches, end_to_end);
criterion_main!(benches);

//! Events per second delivered over AMQP to one reader from 4 partitions filled through the
//! library API. The reader is Microsoft's Rust SDK (`azure_messaging_eventhubs`, what
//! cloud-writer reads with): one client, a partition receiver on each partition at its
//! default prefetch. A second figure reads with a plain fe2o3-amqp receiver per partition, the
//! cost of the hub with a lighter client beside it.
//!
//! Each iteration opens the receivers at the start of the partitions and reads every event
//! (the partitions are filled once). Besides criterion's rate it prints the whole process's
//! CPU seconds per event (hub and reader run in this process). `cargo test --benches` runs
//! each function once on a small fill; `cargo bench` reads 25,000 events per partition.

#[path = "common/cpu.rs"]
mod cpu;
#[path = "../tests/common/readers.rs"]
mod readers;

use cpu::process_cpu;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fe2o3_amqp::types::definitions::SenderSettleMode;
use hub_sim::{AuthMethod, Incoming};
use hub_sim::{HubConfig, HubSim};
use readers::{Fe2o3Reader, fe2o3_read, sdk_consumer, sdk_read};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PARTITIONS: usize = 4;
/// The SDK's default prefetch, which cloud-writer's processor keeps.
const CREDIT: u32 = 300;
const PAYLOAD: &str = r#"{"v":1,"deviceId":"drone-0001","seq":123456,"ts":"2026-11-22T09:15:02.500Z","lat":47.6062,"lon":-122.3321,"altM":120.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81}"#;

/// Events per partition: the full figure under `cargo bench`, a small fill under
/// `cargo test --benches` (which passes no `--bench`).
fn per_partition() -> usize {
    if std::env::args().any(|a| a == "--bench") {
        25_000
    } else {
        500
    }
}

/// A device message as the edge agent sends it and the hub routes it.
fn message(device: &str) -> Incoming {
    let mut message = Incoming::new(device, PAYLOAD);
    message.auth = AuthMethod::Sas;
    message.content_type = Some("application/json".into());
    message.content_encoding = Some("utf-8".into());
    message.properties = vec![(
        "iothub-creation-time-utc".into(),
        "2026-11-22T09:15:02.500Z".into(),
    )];
    message
}

/// Wall time and CPU time of reading every event, summed over `iters` iterations.
#[derive(Default)]
struct Totals {
    wall: Duration,
    cpu: Duration,
    events: u64,
}

impl Totals {
    fn report(&self, name: &str) {
        if self.events > 0 {
            eprintln!(
                "{name}: {} events, {:.0} events/s, {:.2} µs CPU per event (whole process)",
                self.events,
                self.events as f64 / self.wall.as_secs_f64(),
                self.cpu.as_secs_f64() * 1e6 / self.events as f64
            );
        }
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hub = rt
        .block_on(HubSim::start(HubConfig::new(dir.path())))
        .unwrap();
    let n = per_partition();
    for p in 0..PARTITIONS {
        for _ in 0..n {
            hub.partitions().append_to(p, message("drone-0001"));
        }
    }
    let expected: Vec<i64> = (0..n as i64).collect();
    let mut group = c.benchmark_group("hub_sim");
    group.sample_size(10);
    group.throughput(Throughput::Elements((PARTITIONS * n) as u64));

    let consumer = Arc::new(rt.block_on(sdk_consumer(&hub)));
    let mut sdk = Totals::default();
    group.bench_function("amqp_events_delivered_rust_sdk", |b| {
        b.iter_custom(|iters| {
            let (wall, cpu) = (Instant::now(), process_cpu());
            for _ in 0..iters {
                let reads = (0..PARTITIONS).map(|p| {
                    let consumer = consumer.clone();
                    rt.spawn(async move { sdk_read(&consumer, p, n).await })
                });
                for read in rt.block_on(futures::future::join_all(reads)) {
                    assert_eq!(read.unwrap(), expected);
                }
            }
            let elapsed = wall.elapsed();
            sdk.wall += elapsed;
            sdk.cpu += process_cpu() - cpu;
            sdk.events += iters * (PARTITIONS * n) as u64;
            elapsed
        })
    });
    sdk.report("rust sdk");

    let mut plain = Totals::default();
    group.bench_function("amqp_events_delivered_fe2o3", |b| {
        b.iter_custom(|iters| {
            let (wall, cpu) = (Instant::now(), process_cpu());
            for _ in 0..iters {
                rt.block_on(async {
                    let mut reader = Fe2o3Reader::connect(&hub).await;
                    let mut reads = Vec::new();
                    for p in 0..PARTITIONS {
                        let mut receiver = reader
                            .receiver(&hub, p, SenderSettleMode::Mixed, CREDIT)
                            .await;
                        reads.push(tokio::spawn(async move {
                            let read = fe2o3_read(&mut receiver, n).await;
                            receiver.close().await.unwrap();
                            read
                        }));
                    }
                    for read in futures::future::join_all(reads).await {
                        assert_eq!(read.unwrap(), expected);
                    }
                    reader.close().await;
                });
            }
            let elapsed = wall.elapsed();
            plain.wall += elapsed;
            plain.cpu += process_cpu() - cpu;
            plain.events += iters * (PARTITIONS * n) as u64;
            elapsed
        })
    });
    plain.report("fe2o3");
    group.finish();
    rt.block_on(hub.shutdown());
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The cloud writer's pipeline.
//!
//! - `pipeline/bytes_to_batched_document`: CPU per message from the received bytes to
//!   the operation appended to a bulk batch body: decode and validate, identity check,
//!   staleness, coalescing per drone, the latest document and its conditional patch,
//!   the partition key's EPK hash (hash v2), the batch body. One thread, no I/O.
//! - `pipeline/mosquitto_to_cosmos`: end to end through a harness-started Mosquitto
//!   (QoS 1, persistent session, in-order PUBACKs) to the unthrottled local Cosmos
//!   endpoint, the writer in-process; positions per second from the first PUBLISH to the
//!   last final outcome. Each payload's device time is its publish time, so the writer's
//!   device-to-written lateness histogram is the end-to-end lateness; its 99th and 50th
//!   percentiles' bucket bounds are printed after the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::Utc;
use cloud_writer::Writer;
use cloud_writer::config::{Secret, Settings};
use cloud_writer::metrics::Metrics;
use cloud_writer::pipeline::coalesce::Coalescer;
use cloud_writer::pipeline::reject::Rejects;
use cloud_writer::pipeline::{PositionWrite, prepare_batch};
use cloud_writer::sink::encode::Encoder;
use cloud_writer::source::{Ack, Message};
use cosmos_sim::CosmosSim;
use cosmos_wire::batch::{BatchBody, OperationRef, OperationType, partition_key_json};
use cosmos_wire::epk::epk_u128_of_str;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use telemetry::{DocumentLayout, StalenessPolicy};
use test_harness::Mosquitto;

/// Messages per pipeline batch (the writer's default batch size).
const BATCH: usize = 2_000;

fn payload(device: &str, seq: u64) -> Vec<u8> {
    let ts = Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ");
    format!(
        r#"{{"v":1,"deviceId":"{device}","seq":{seq},"ts":"{ts}","lat":47.6205,"lon":-122.3493,"altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81}}"#
    )
    .into_bytes()
}

/// CPU time this thread has run, from `/proc/thread-self/schedstat` (nanoseconds).
fn thread_cpu_time() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat (Linux)");
    let ns = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("schedstat's first field");
    Duration::from_nanos(ns)
}

/// Received messages to batch request bodies, as the writer does it.
fn to_batches(
    messages: Vec<Message>,
    policy: &StalenessPolicy,
    rejects: &Rejects,
    encoder: &Encoder,
    coalescer: &mut Coalescer<PositionWrite>,
    superseded: &mut Vec<PositionWrite>,
) -> Vec<Vec<u8>> {
    prepare_batch(messages, Utc::now(), policy, rejects, coalescer, superseded);
    let mut bodies = Vec::new();
    let mut body = BatchBody::new();
    for write in coalescer.drain() {
        let encoded = encoder.encode(&write.position, write.enqueued);
        let id = &write.position.device_id;
        let epk = epk_u128_of_str(id);
        let pk = partition_key_json(id);
        let patch = encoded.patch.expect("patch mode");
        let op = OperationRef {
            operation_type: OperationType::Patch,
            partition_key: &pk,
            id: Some(id),
            resource_body: Some(&patch),
            if_match: None,
        };
        if body.len() == 100 {
            bodies.push(std::mem::take(&mut body).finish());
        }
        body.push(&op);
        std::hint::black_box((epk, encoded.latest));
        write.ack.finish();
    }
    bodies.push(body.finish());
    bodies
}

fn bytes_to_batched_document(c: &mut Criterion) {
    let devices: Vec<String> = (0..BATCH).map(|d| format!("drone-{d:05}")).collect();
    let payloads: Vec<Bytes> = devices.iter().map(|d| Bytes::from(payload(d, 7))).collect();
    let metrics = Arc::new(Metrics::new());
    let rejects = Rejects::new(metrics.clone(), None).unwrap();
    let policy = StalenessPolicy::default();
    let encoder = Encoder::new(DocumentLayout::default(), true, None);
    let mut coalescer: Coalescer<PositionWrite> = Coalescer::default();
    let mut superseded = Vec::new();
    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Elements(BATCH as u64));
    // Timed in thread CPU time, not wall time: the figure is CPU per message, and it
    // stays meaningful on a machine busy with other work.
    group.bench_function("bytes_to_batched_document", |b| {
        b.iter_custom(|iters| {
            let mut cpu = Duration::ZERO;
            for _ in 0..iters {
                let messages: Vec<Message> = devices
                    .iter()
                    .zip(&payloads)
                    .map(|(d, p)| Message {
                        identity: d.clone(),
                        payload: p.clone(),
                        enqueued_time: None,
                        received_at: Instant::now(),
                        ack: Ack::none(),
                    })
                    .collect();
                let start = thread_cpu_time();
                let bodies = to_batches(
                    messages,
                    &policy,
                    &rejects,
                    &encoder,
                    &mut coalescer,
                    &mut superseded,
                );
                cpu += thread_cpu_time() - start;
                drop(std::hint::black_box(bodies));
            }
            cpu
        });
    });
    group.finish();
}

fn percentile_bound(metrics: &Metrics, q: f64) -> Option<f64> {
    let text = metrics.render();
    let prefix = "cloud_writer_lateness_device_to_written_seconds_bucket{le=\"";
    let buckets: Vec<(f64, u64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix)?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.parse().ok()?))
        })
        .collect();
    let total = buckets.last()?.1;
    let target = (total as f64 * q).ceil() as u64;
    buckets
        .iter()
        .find(|(_, n)| *n >= target)
        .map(|(le, _)| *le)
}

/// Publishers, each on its own connection, with a count of PUBACKs received.
async fn publishers(port: u16, n: usize) -> Vec<AsyncClient> {
    let mut clients = Vec::new();
    for i in 0..n {
        let mut options = MqttOptions::new(format!("bench-publisher-{i}"), "127.0.0.1", port);
        options
            .set_inflight(1000)
            .set_request_channel_capacity(20_000)
            .set_keep_alive(Duration::from_secs(30));
        let (client, mut eventloop) = AsyncClient::new(options, 20_000);
        tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) | Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        });
        clients.push(client);
    }
    clients
}

fn mosquitto_to_cosmos(c: &mut Criterion) {
    const DRONES: usize = 5_000;
    const PER_ITER: usize = 20_000;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let broker = Mosquitto::start().expect("mosquitto");
    let (sim, writer, clients) = rt.block_on(async {
        let sim = CosmosSim::builder()
            .partitions(4)
            .ru_per_sec(f64::INFINITY)
            .start()
            .await
            .unwrap();
        let settings = Settings {
            cosmos_endpoint: Some(sim.endpoint().parse().unwrap()),
            cosmos_key: Some(Secret::new(sim.key())),
            cosmos_container: Some("bench".into()),
            cosmos_create_if_missing: Some(true),
            writer_source: Some(Secret::new(broker.url())),
            mqtt_client_id: Some("bench-writer".into()),
            metrics_addr: Some("off".into()),
            ..Settings::default()
        };
        let writer = Writer::start(settings.resolve().unwrap()).await.unwrap();
        while !writer.metrics().is_ready() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let clients = publishers(broker.port(), 4).await;
        (sim, writer, clients)
    });
    let mut seq = 0u64;
    let mut group = c.benchmark_group("pipeline");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(PER_ITER as u64));
    group.bench_function("mosquitto_to_cosmos", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    seq += 1;
                    let target = writer.counts().finished() + PER_ITER as u64;
                    let start = Instant::now();
                    let mut sends = Vec::new();
                    for (i, client) in clients.iter().enumerate() {
                        let client = client.clone();
                        let seq = seq;
                        sends.push(tokio::spawn(async move {
                            for n in (i..PER_ITER).step_by(4) {
                                let device = format!("drone-{:05}", n % DRONES);
                                let topic = format!("devices/{device}/messages/events/");
                                let body = payload(&device, seq * 10 + (n / DRONES) as u64);
                                client
                                    .publish(topic, QoS::AtLeastOnce, false, body)
                                    .await
                                    .unwrap();
                            }
                        }));
                    }
                    for send in sends {
                        send.await.unwrap();
                    }
                    while writer.counts().finished() < target {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    elapsed += start.elapsed();
                }
                elapsed
            })
        });
    });
    group.finish();
    eprintln!(
        "pipeline/mosquitto_to_cosmos: lateness (published to written) p99 <= {:?} s, p50 <= {:?} s; counts {:?}",
        percentile_bound(writer.metrics(), 0.99),
        percentile_bound(writer.metrics(), 0.50),
        writer.counts()
    );
    rt.block_on(async {
        writer.shutdown();
        let _ = writer.wait().await;
        sim.shutdown().await;
    });
    drop(broker);
}

criterion_group!(benches, bytes_to_batched_document, mosquitto_to_cosmos);
criterion_main!(benches);

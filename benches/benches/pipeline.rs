//! The cloud writer's pipeline.
//!
//! - `pipeline/bytes_to_batched_document`: CPU per message from the received bytes to
//!   the operation appended to a bulk batch body: decode and validate, identity check,
//!   staleness, coalescing per drone, the conditional patch (what a known drone's
//!   position is written as), the partition key's EPK hash (hash v2), the batch body.
//!   One thread, no I/O.
//! - `pipeline/mosquitto_to_cosmos`: end to end through a harness-started Mosquitto
//!   (QoS 1, persistent session, in-order PUBACKs) to the unthrottled local Cosmos
//!   endpoint, the writer in-process; positions per second from the first PUBLISH to the
//!   last final outcome. Each payload's device time is its publish time, so the writer's
//!   device-to-written lateness histogram is the end-to-end lateness; its 99th and 50th
//!   percentiles' bucket bounds are printed after the run.
//! - `pipeline/mosquitto_to_cosmos_paced`: the same path at a fixed offered rate (20,000
//!   positions/s for 15 s), the lateness figure of the issue; see
//!   [`mosquitto_to_cosmos_paced`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::{Publishers, selected, wire_payload};
use bytes::Bytes;
use chrono::Utc;
use cloud_writer::DropReason;
use cloud_writer::Metrics;
use cloud_writer::Writer;
use cloud_writer::internals::Coalescer;
use cloud_writer::internals::Encoder;
use cloud_writer::internals::PositionWrite;
use cloud_writer::internals::Rejects;
use cloud_writer::internals::prepare_batch;
use cloud_writer::internals::{Ack, Message};
use cloud_writer::{Secret, Settings};
use cosmos_sim::CosmosSim;
use cosmos_wire::batch::{BatchBody, OperationRef, OperationType, partition_key_json};
use cosmos_wire::epk::epk_u128_of_str;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rumqttc::{AsyncClient, QoS};
use telemetry::{DocumentLayout, StalenessPolicy};
use test_harness::Mosquitto;

/// Messages per pipeline batch (the writer's default batch size).
const BATCH: usize = 2_000;

/// CPU time this thread has run (`CLOCK_THREAD_CPUTIME_ID`, exact to the nanosecond; the
/// scheduler's statistics advance only at ticks and context switches).
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A conditional patch of the drone `id` as a batch operation.
fn operation<'a>(pk: &'a str, id: &'a str, patch: &'a [u8]) -> OperationRef<'a> {
    OperationRef {
        operation_type: OperationType::Patch,
        partition_key: pk,
        id: Some(id),
        resource_body: Some(patch),
        if_match: None,
    }
}

/// Received messages to batch request bodies, as the writer does it. Not inlined, so that
/// a profiler can count its instructions alone
/// (`valgrind --tool=callgrind --toggle-collect='*to_batches*'`).
#[inline(never)]
fn to_batches(
    messages: Vec<Message>,
    policy: &StalenessPolicy,
    rejects: &Rejects,
    metrics: &Metrics,
    encoder: &Encoder,
    coalescer: &mut Coalescer<PositionWrite>,
    superseded: &mut Vec<PositionWrite>,
) -> Vec<Vec<u8>> {
    prepare_batch(
        messages,
        Utc::now(),
        policy,
        rejects,
        metrics,
        coalescer,
        superseded,
        &mut Vec::new(),
    );
    let mut bodies = Vec::new();
    // As the bulk writer: a batch's operations are collected with their encoded length,
    // then written into a body reserved at their total.
    let mut batch: Vec<(String, &str, Bytes)> = Vec::with_capacity(100);
    let mut writes: Vec<PositionWrite> = coalescer.drain().collect();
    for chunk in writes.chunks(100) {
        let mut bytes = 2;
        for write in chunk {
            // A drone the writer knows: its conditional patch (a new drone's first write is
            // its document instead, about as long).
            let patch = encoder
                .patch(&write.position, write.enqueued)
                .expect("patch mode");
            let id = write.position.device_id.as_str();
            std::hint::black_box(epk_u128_of_str(id));
            let pk = partition_key_json(id);
            bytes += BatchBody::encoded_len(&operation(&pk, id, &patch));
            batch.push((pk, id, patch));
        }
        let mut body = BatchBody::with_capacity(bytes);
        for (pk, id, patch) in batch.drain(..) {
            body.push(&operation(&pk, id, &patch));
        }
        bodies.push(body.finish());
    }
    for write in writes.drain(..) {
        write.ack.finish();
    }
    bodies
}

fn bytes_to_batched_document(c: &mut Criterion) {
    let devices: Vec<String> = (0..BATCH).map(|d| format!("drone-{d:05}")).collect();
    let payloads: Vec<Bytes> = devices
        .iter()
        .map(|d| Bytes::from(wire_payload(d, 7, Utc::now())))
        .collect();
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
                        kind: Default::default(),
                        ack: Ack::none(),
                    })
                    .collect();
                let start = thread_cpu_time();
                let bodies = to_batches(
                    messages,
                    &policy,
                    &rejects,
                    &metrics,
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

/// A harness-started Mosquitto, the unthrottled local endpoint (4 ranges) and the writer
/// in-process, subscribed; `connections` publishing connections.
struct Stack {
    broker: Mosquitto,
    sim: CosmosSim,
    writer: Writer,
    clients: Vec<AsyncClient>,
}

impl Stack {
    fn start(rt: &tokio::runtime::Runtime, connections: usize) -> Stack {
        let broker = Mosquitto::start().expect("mosquitto");
        let (sim, writer, clients) = rt.block_on(async {
            let sim = CosmosSim::unthrottled().await.unwrap();
            let settings = Settings {
                cosmos_endpoint: Some(sim.endpoint().parse().unwrap()),
                cosmos_key: Some(Secret::new(sim.key())),
                cosmos_container: Some("bench".into()),
                cosmos_create_if_missing: Some(true),
                writer_source: Some(Secret::new(broker.url())),
                mqtt_client_id: Some("bench-writer".into()),
                metrics_addr: Some("off".into()),
                probe_addr: Some("off".into()),
                ..Settings::default()
            };
            let writer = Writer::start(settings.resolve().unwrap()).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            while !writer.metrics().is_ready() {
                assert!(Instant::now() < deadline, "the writer did not get ready");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let clients =
                Publishers::connect(broker.port(), connections, "bench-publisher-").clients;
            (sim, writer, clients)
        });
        Stack {
            broker,
            sim,
            writer,
            clients,
        }
    }

    /// Waits until the writer has a final outcome for `target` messages in all.
    async fn settle(&self, target: u64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.writer.counts().finished() < target {
            assert!(
                Instant::now() < deadline,
                "the writer did not settle: {:?}",
                self.writer.counts()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn stop(self, rt: &tokio::runtime::Runtime) {
        rt.block_on(async {
            self.writer.shutdown();
            let _ = self.writer.wait().await;
            self.sim.shutdown().await;
        });
        drop(self.broker);
    }
}

/// Drones whose positions the end-to-end runs publish.
const E2E_DRONES: usize = 5_000;

fn e2e_publish(client: &AsyncClient, n: usize, seq: u64) -> impl Future<Output = ()> + use<> {
    let client = client.clone();
    let device = format!("drone-{:05}", n % E2E_DRONES);
    async move {
        let topic = format!("devices/{device}/messages/events/");
        let body = wire_payload(&device, seq, Utc::now());
        client
            .publish(topic, QoS::AtLeastOnce, false, body)
            .await
            .unwrap();
    }
}

fn mosquitto_to_cosmos(c: &mut Criterion) {
    const PER_ITER: usize = 20_000;
    if !selected("pipeline/mosquitto_to_cosmos").0 {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stack = Stack::start(&rt, 4);
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
                    let target = stack.writer.counts().finished() + PER_ITER as u64;
                    let start = Instant::now();
                    let mut sends = Vec::new();
                    for (i, client) in stack.clients.iter().enumerate() {
                        let client = client.clone();
                        let seq = seq;
                        sends.push(tokio::spawn(async move {
                            for n in (i..PER_ITER).step_by(4) {
                                e2e_publish(&client, n, seq * 10 + (n / E2E_DRONES) as u64).await;
                            }
                        }));
                    }
                    for send in sends {
                        send.await.unwrap();
                    }
                    stack.settle(target).await;
                    elapsed += start.elapsed();
                }
                elapsed
            })
        });
    });
    group.finish();
    eprintln!(
        "pipeline/mosquitto_to_cosmos: lateness (published to written) p99 <= {:?} s, p50 <= {:?} s; counts {:?}",
        percentile_bound(stack.writer.metrics(), 0.99),
        percentile_bound(stack.writer.metrics(), 0.50),
        stack.writer.counts()
    );
    stack.stop(&rt);
}

/// `pipeline/mosquitto_to_cosmos_paced`: positions published at a fixed rate
/// ([`PACED_RATE`] per second for [`PACED_SECONDS`], evenly every 2 ms over 4
/// connections), not as a burst, so that lateness is the writer's, not the queue of a
/// burst. Lateness from publish (the payload's device time) to written, from the
/// writer's histogram: its 50th and 99th percentiles' bucket bounds. One measured run,
/// not a criterion sample (it is a latency figure at a given load). CI's quick mode runs
/// it at a tenth of the rate for one second.
fn mosquitto_to_cosmos_paced(_: &mut Criterion) {
    const PACED_RATE: usize = 20_000;
    const PACED_SECONDS: u64 = 15;
    const TICK: Duration = Duration::from_millis(2);
    const PUBLISHERS: usize = 4;
    let name = "pipeline/mosquitto_to_cosmos_paced";
    let (chosen, full) = selected(name);
    if !chosen {
        return;
    }
    let (rate, seconds) = if full {
        (PACED_RATE, PACED_SECONDS)
    } else {
        (PACED_RATE / 10, 1)
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stack = Stack::start(&rt, PUBLISHERS);
    let ticks = seconds * 1000 / TICK.as_millis() as u64;
    let per_tick = rate * TICK.as_millis() as usize / 1000;
    let total = ticks as usize * per_tick;
    let (published, elapsed) = rt.block_on(async {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for (i, client) in stack.clients.iter().enumerate() {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let mut interval = tokio::time::interval(TICK);
                let mut sent = 0usize;
                for tick in 0..ticks {
                    interval.tick().await;
                    for k in (i..per_tick).step_by(PUBLISHERS) {
                        let n = tick as usize * per_tick + k;
                        e2e_publish(&client, n, (n / E2E_DRONES) as u64 + 1).await;
                        sent += 1;
                    }
                }
                sent
            }));
        }
        let mut published = 0;
        for task in tasks {
            published += task.await.unwrap();
        }
        let publishing = start.elapsed();
        stack.settle(total as u64).await;
        (published, (publishing, start.elapsed()))
    });
    let counts = stack.writer.counts();
    eprintln!(
        "{name}: offered {rate}/s for {seconds} s: {published} published in {:.2} s ({:.0}/s), all final after {:.2} s; \
         lateness (published to written) p50 <= {:?} s, p99 <= {:?} s; counts {counts:?}",
        elapsed.0.as_secs_f64(),
        published as f64 / elapsed.0.as_secs_f64(),
        elapsed.1.as_secs_f64(),
        percentile_bound(stack.writer.metrics(), 0.50),
        percentile_bound(stack.writer.metrics(), 0.99),
    );
    assert_eq!(published, total);
    assert_eq!(counts.dropped(DropReason::Stale), 0, "{counts:?}");
    stack.stop(&rt);
}

criterion_group!(
    benches,
    bytes_to_batched_document,
    mosquitto_to_cosmos,
    mosquitto_to_cosmos_paced
);
criterion_main!(benches);

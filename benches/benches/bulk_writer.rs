//! Documents per second written through the `cosmos` client to the local endpoint (cosmos-sim,
//! in process, unthrottled, 4 partitions): the bulk writer against the two ways the field
//! wrote before, one upsert request per document one at a time, and one upsert request per
//! document with 64 in flight. Each runs with no added latency and with 5 ms added to every
//! request (the sim sleeps before answering), which is where batching matters most.
//!
//! The bulk writer lives across iterations, as it does in the cloud-writer: its per-range
//! concurrency has ramped up after the warm-up. Documents overwrite a fixed set of device ids,
//! as newest-wins upserts do.
//!
//! `cargo bench -p benches --bench bulk_writer`; `-- --test` runs each case once.

use std::time::{Duration, Instant};

use benches::position_document;
use bytes::Bytes;
use cosmos::{
    BulkConfig, BulkOperation, BulkOutcomes, BulkWriter, ContainerClient, CosmosClient,
    CosmosConfig, Credential, MasterKey, OperationType,
};
use cosmos_sim::CosmosSim;
use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use futures::StreamExt as _;

const DB: &str = "bench";
const COLL: &str = "positions";
/// Distinct devices (partition keys and ids).
const DEVICES: usize = 10_000;

/// `(partition key, document)` pairs, one per device.
fn documents() -> Vec<(String, Bytes)> {
    (0..DEVICES)
        .map(|i| {
            let device = format!("drone-{i:05}");
            let doc = Bytes::from(position_document(&device, i));
            (device, doc)
        })
        .collect()
}

struct Bench {
    sim: CosmosSim,
    container: ContainerClient,
    writer: BulkWriter<()>,
    outcomes: BulkOutcomes<()>,
    docs: Vec<(String, Bytes)>,
}

async fn setup() -> Bench {
    let sim = CosmosSim::unthrottled().await.expect("cosmos-sim starts");
    sim.create_container(DB, COLL, "/deviceId")
        .expect("container");
    let key = MasterKey::from_base64(sim.key()).expect("key");
    let config = CosmosConfig::new(
        sim.endpoint().parse().expect("url"),
        Credential::MasterKey(key),
    );
    let client = CosmosClient::new(config).expect("client");
    let container = client.container(DB, COLL);
    let (writer, outcomes) = container.bulk_writer(BulkConfig::default());
    Bench {
        sim,
        container,
        writer,
        outcomes,
        docs: documents(),
    }
}

impl Bench {
    /// Writes `n` documents through the bulk writer and waits for their outcomes.
    async fn bulk(&mut self, n: usize) {
        let writer = self.writer.clone();
        let docs: Vec<(String, Bytes)> = self.docs.iter().cycle().take(n).cloned().collect();
        let feeder = tokio::spawn(async move {
            for (key, body) in docs {
                let op = BulkOperation {
                    kind: OperationType::Upsert,
                    partition_key: key.into(),
                    id: None,
                    body,
                    if_match: None,
                    context: (),
                };
                writer.submit(op).await.expect("writer open");
            }
        });
        for _ in 0..n {
            let outcome = self.outcomes.next().await.expect("outcome");
            assert!(outcome.is_success(), "{outcome:?}");
        }
        feeder.await.expect("feeder");
    }

    /// Writes `n` documents with one upsert request each, `in_flight` at a time.
    async fn single(&self, n: usize, in_flight: usize) {
        let container = &self.container;
        futures::stream::iter(self.docs.iter().cycle().take(n))
            .for_each_concurrent(in_flight, |(key, body)| async move {
                container.upsert(key, body).await.expect("upsert");
            })
            .await;
    }
}

/// Runs one case: `docs` documents per iteration, each sample a fixed number of iterations.
fn case<F>(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &tokio::runtime::Runtime,
    bench: &mut Bench,
    name: &str,
    docs: usize,
    run: F,
) where
    F: for<'a> Fn(&'a mut Bench, usize) -> futures::future::BoxFuture<'a, ()>,
{
    group.throughput(Throughput::Elements(docs as u64));
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    run(bench, docs).await;
                }
                start.elapsed()
            })
        })
    });
}

fn run_group(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    bench: &mut Bench,
    latency: Duration,
) {
    bench.sim.set_latency(latency);
    let label = format!("bulk_writer/latency_{}ms", latency.as_millis());
    let mut group = c.benchmark_group(label);
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    // Sizes keep one iteration between about 50 ms and 1 s. Run by `cargo test` (no
    // `--bench`), criterion runs each case once to prove it works: a tenth of the size will do.
    let scale = if std::env::args().any(|a| a == "--bench") {
        1
    } else {
        10
    };
    let serial_docs = if latency.is_zero() { 2_000 } else { 200 } / scale;
    case(&mut group, rt, bench, "bulk", 50_000 / scale, |b, n| {
        Box::pin(b.bulk(n))
    });
    case(
        &mut group,
        rt,
        bench,
        "single_64_in_flight",
        10_000 / scale,
        |b, n| Box::pin(b.single(n, 64)),
    );
    case(
        &mut group,
        rt,
        bench,
        "single_serial",
        serial_docs,
        |b, n| Box::pin(b.single(n, 1)),
    );
    group.finish();
}

fn bulk_writer(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut bench = rt.block_on(setup());
    run_group(c, &rt, &mut bench, Duration::ZERO);
    run_group(c, &rt, &mut bench, Duration::from_millis(5));
    let stats = bench.writer.stats();
    eprintln!(
        "bulk writer: {} batches, {} operations, concurrency per range {:?}",
        stats.total.batches,
        stats.total.operations,
        stats
            .ranges
            .values()
            .map(|r| r.concurrency)
            .collect::<Vec<_>>()
    );
}

criterion_group!(benches, bulk_writer);
criterion_main!(benches);

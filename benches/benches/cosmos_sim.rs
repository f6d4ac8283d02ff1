//! Unthrottled bulk document writes through the local Cosmos endpoint (cosmos-sim), in
//! process: concurrent range-targeted bulk batches of 100 upserts over HTTP/1.1 keep-alive,
//! signed like a real client, with position documents as the cloud-writer writes them. The
//! figure is documents written per second, server and client sharing the machine's cores.

use std::time::{Duration, Instant};

use benches::position_document;
use cosmos_sim::CosmosSim;
use cosmos_wire::auth::{MasterKey, resource_for_path};
use cosmos_wire::batch::{BatchBody, OperationRef, OperationType, partition_key_json};
use cosmos_wire::epk::{boundary_to_u128, epk_u128_of_str};
use cosmos_wire::headers as h;
use cosmos_wire::resources::PartitionKeyRanges;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// Operations per batch (the service's limit).
const OPS: usize = 100;
/// Distinct devices; upserts overwrite their documents, as newest-wins writes do.
const DEVICES: usize = 20_000;
/// Batches in flight at once.
const CONCURRENCY: usize = 16;
/// Batches per measured iteration.
const BATCHES_PER_ITER: u64 = 64;
/// Physical partitions of the container.
const PARTITIONS: usize = 4;

struct Setup {
    sim: CosmosSim,
    client: reqwest::Client,
    key: MasterKey,
    /// Pre-built batch bodies, with the range each targets.
    bodies: Vec<(String, bytes::Bytes)>,
}

async fn setup() -> Setup {
    let sim = CosmosSim::builder()
        .partitions(PARTITIONS)
        .ru_per_sec(f64::INFINITY)
        .start()
        .await
        .expect("cosmos-sim starts");
    sim.create_container("bench", "positions", "/deviceId")
        .expect("container");
    let key = MasterKey::from_base64(sim.key()).expect("key");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENCY)
        .http1_only()
        .build()
        .expect("client");
    let ranges: PartitionKeyRanges = send(
        &client,
        &sim,
        &key,
        "GET",
        "/dbs/bench/colls/positions/pkranges",
        &[],
        bytes::Bytes::new(),
    )
    .await
    .json()
    .await
    .expect("pkranges");
    let mut bodies = Vec::new();
    for range in &ranges.ranges {
        let (lo, hi) = (
            boundary_to_u128(&range.min_inclusive).expect("boundary"),
            boundary_to_u128(&range.max_exclusive).expect("boundary"),
        );
        let devices: Vec<String> = (0..DEVICES)
            .map(|i| format!("drone-{i:05}"))
            .filter(|d| (lo..hi).contains(&epk_u128_of_str(d)))
            .collect();
        for (chunk_no, chunk) in devices.chunks(OPS).enumerate() {
            if chunk.len() < OPS {
                continue;
            }
            let mut body = BatchBody::new();
            for (i, d) in chunk.iter().enumerate() {
                let (pk, doc) = (
                    partition_key_json(d),
                    position_document(d, chunk_no * OPS + i),
                );
                body.push(&OperationRef {
                    operation_type: OperationType::Upsert,
                    partition_key: &pk,
                    id: None,
                    resource_body: Some(doc.as_bytes()),
                    if_match: None,
                });
            }
            bodies.push((range.id.clone(), bytes::Bytes::from(body.finish())));
        }
    }
    Setup {
        sim,
        client,
        key,
        bodies,
    }
}

async fn send(
    client: &reqwest::Client,
    sim: &CosmosSim,
    key: &MasterKey,
    verb: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: bytes::Bytes,
) -> reqwest::Response {
    let date = cosmos_wire::http_date(std::time::SystemTime::now());
    let (rtype, link) = resource_for_path(path);
    let mut req = client
        .request(
            verb.parse().expect("method"),
            format!("{}{}", sim.endpoint().trim_end_matches('/'), path),
        )
        .header(
            "authorization",
            key.authorization(verb, &rtype, &link, &date),
        )
        .header(h::DATE, date)
        .header(h::VERSION, cosmos_wire::API_VERSION)
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("request");
    assert!(resp.status().is_success(), "{} {}", resp.status(), path);
    resp
}

/// Sends `batches` bulk batches with `CONCURRENCY` in flight; returns the elapsed time.
async fn write_batches(s: &Setup, batches: u64) -> Duration {
    let start = Instant::now();
    let workers = (0..CONCURRENCY).map(|w| async move {
        let mut n = w;
        while (n as u64) < batches {
            let (range, body) = &s.bodies[n % s.bodies.len()];
            let headers = [
                (h::IS_BATCH_REQUEST, "True"),
                (h::BATCH_ATOMIC, "False"),
                (h::BATCH_CONTINUE_ON_ERROR, "True"),
                (h::PARTITION_KEY_RANGE_ID, range.as_str()),
                ("content-type", "application/json"),
            ];
            let resp = send(
                &s.client,
                &s.sim,
                &s.key,
                "POST",
                "/dbs/bench/colls/positions/docs",
                &headers,
                body.clone(),
            )
            .await;
            assert_eq!(resp.status(), 200, "every upsert succeeds unthrottled");
            resp.bytes().await.expect("body");
            n += CONCURRENCY;
        }
    });
    futures::future::join_all(workers).await;
    start.elapsed()
}

fn bulk_writes(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let setup = rt.block_on(setup());
    let mut group = c.benchmark_group("cosmos_sim");
    group.throughput(Throughput::Elements(OPS as u64 * BATCHES_PER_ITER));
    group.measurement_time(Duration::from_secs(10));
    group.sample_size(20);
    group.bench_function("bulk_upsert_6400_docs_in_batches_of_100", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| write_batches(&setup, iters * BATCHES_PER_ITER));
    });
    group.finish();
    let stats = setup.sim.stats();
    let written: u64 = stats.operations.get("upsert").copied().unwrap_or(0);
    println!(
        "cosmos_sim: {written} upserts served, {} requests",
        stats.requests
    );
}

criterion_group!(benches, bulk_writes);
criterion_main!(benches);

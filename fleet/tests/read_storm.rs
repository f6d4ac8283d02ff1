//! The read storm: the real cloud writer at a steady load on a throttled local Cosmos
//! endpoint, first alone, then with 16 clients asking the read API `near` queries without
//! pause. With the API's queries at low priority and each client held to its RU budget, the
//! writer's throttled operations rise by at most 5 % of its operations and its p99 lateness by
//! at most 100 ms, and the storming clients get 429 with `Retry-After` from the API.
//!
//! Every figure comes from counters read before and after a phase (the writer's own, the
//! endpoint's), never from the wall clock. `read_storm_without_priority_or_budgets` (ignored:
//! a measurement, not a check) runs the same storm with the API as it was before (high
//! priority, no budget) for `docs/performance.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cloud_writer::Snapshot;
use cloud_writer::Writer;
use cosmos::{CosmosClient, CosmosConfig, Credential, MasterKey, Priority};
use cosmos_sim::{CosmosSim, Stats};
use fleet::DemoConfig;
use fleet::{Broker, BrokerKind};
use fleet::{LoadgenConfig, Target};
use fleet_api::ApiOptions;
use fleet_api::RuBudget;
use fleet_api::{Access, AccessConfig, ApiKeys, Role, key_line};
use serde_json::json;
use test_harness::eventually;
use tokio_util::sync::CancellationToken;

/// The longest the test may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(300);
/// The endpoint's provisioned RU/s (4 partitions of 300; the writer's load takes about 60 %).
const RU_PER_SEC: f64 = 1200.0;
/// The writer's steady load: positions per second, from this many drones.
const RATE: f64 = 100.0;
const DRONES: usize = 100;
/// Each phase's length.
const PHASE: Duration = Duration::from_secs(20);
/// Clients in the storm, each with an API key of its own.
const CLIENTS: usize = 16;
/// Documents besides the drones' that every near query scans (they make a query cost about
/// 4 × (2.3 + 0.02 × 2,000) ≈ 170 RU, as a container with history documents does).
const FILLER: usize = 8000;
/// Each client's RU/s: the 16 together may ask about a third of the endpoint's RU/s, which
/// with the writer's load is more than the endpoint has (the debug build's query engine costs
/// about a millisecond of CPU per RU, so a larger budget measures the machine's CPU instead).
const BUDGET: f64 = 25.0;

/// How the API reads.
#[derive(Debug, Clone, Copy)]
enum Api {
    /// Low priority, each client held to [`BUDGET`].
    Protected,
    /// As before: high priority, no budget.
    Unprotected,
}

/// What one phase did.
#[derive(Debug)]
struct Phase {
    /// The writer's operations (every attempt, from the endpoint's counters).
    writer_operations: u64,
    /// The writer's operations answered 429 (its own counter).
    writer_throttled: u64,
    /// The writer's lateness p99, seconds.
    lateness_p99: f64,
    /// Positions the load generator had acknowledged.
    acked: u64,
    /// The storm's answers: 200, 429 (over the caller's budget), 503 (throttled past the
    /// read's wait; both with Retry-After), others.
    reads_ok: u64,
    reads_refused: u64,
    reads_busy: u64,
    reads_other: u64,
    /// Low-priority operations the endpoint throttled.
    low_priority_throttled: u64,
    /// CPU seconds of the whole process.
    cpu_s: f64,
}

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after the command.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn write_operations(stats: &Stats) -> u64 {
    stats
        .operations
        .iter()
        .filter(|(kind, _)| !matches!(kind.as_str(), "query" | "read"))
        .map(|(_, n)| n)
        .sum()
}

fn client(sim: &CosmosSim) -> CosmosClient {
    let key = MasterKey::from_base64(sim.key()).unwrap();
    CosmosClient::new(CosmosConfig::new(
        sim.endpoint().parse().unwrap(),
        Credential::MasterKey(key),
    ))
    .unwrap()
}

/// Documents that are not drones, scattered over the fleet's area, written at a generous
/// budget.
async fn seed_filler(sim: &CosmosSim) {
    sim.set_ru_per_sec(fleet::DATABASE, fleet::CONTAINER, 1_000_000.0)
        .unwrap();
    let container = client(sim).container(fleet::DATABASE, fleet::CONTAINER);
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..32 {
        let container = container.clone();
        tasks.spawn(async move {
            for i in (worker..FILLER).step_by(32) {
                let id = format!("filler-{i}");
                let lon = -122.2 + (i % 100) as f64 * 0.002;
                let lat = 47.6 + (i / 100) as f64 * 0.001;
                let doc = json!({"id": id, "deviceId": id, "kind": "filler",
                    "location": {"type": "Point", "coordinates": [lon, lat]}});
                container
                    .upsert(id.as_str(), &serde_json::to_vec(&doc).unwrap())
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    sim.set_ru_per_sec(fleet::DATABASE, fleet::CONTAINER, RU_PER_SEC)
        .unwrap();
}

/// The API over the endpoint as `api` says, letting in one key per client; its base URL
/// and the keys.
async fn serve_api(sim: &CosmosSim, api: Api) -> (String, Vec<String>, CancellationToken) {
    let keys: Vec<String> = (0..CLIENTS)
        .map(|i| format!("storm-client-{i:02}-0123456789abcdef0123456789"))
        .collect();
    let lines: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| key_line(&format!("client-{i}"), Role::Read, key).unwrap())
        .collect();
    let access = Access::start(AccessConfig {
        keys: ApiKeys::parse(&lines.join("\n")).unwrap(),
        oidc: None,
        anonymous: false,
    })
    .await
    .unwrap();
    let options = match api {
        Api::Protected => ApiOptions {
            ru_per_sec_per_identity: RuBudget::PerSec(BUDGET),
            ..ApiOptions::default()
        },
        Api::Unprotected => ApiOptions {
            priority: Priority::High,
            ru_per_sec_per_identity: RuBudget::Off,
            ..ApiOptions::default()
        },
    };
    let container = client(sim).container(fleet::DATABASE, fleet::CONTAINER);
    let router = fleet_api::router(container, options, access);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(fleet_api::serve(listener, router, stop.clone()));
    (base, keys, stop)
}

/// The storm's answers.
#[derive(Debug, Default)]
struct Answers {
    ok: AtomicU64,
    refused: AtomicU64,
    busy: AtomicU64,
    other: AtomicU64,
}

/// A client asking `near` without pause until `stop`; after a 429 or a 503 it waits what
/// `Retry-After` says, as the header asks (one without it counts as another answer).
async fn storm_client(base: String, key: String, answers: Arc<Answers>, stop: CancellationToken) {
    let http = reqwest::Client::new();
    let url = format!("{base}/api/drones/near?lat=47.65&lon=-122.1&radius_m=1000");
    while !stop.is_cancelled() {
        let Ok(response) = http.get(&url).header("X-API-Key", &key).send().await else {
            answers.other.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        match (response.status().as_u16(), retry_after) {
            (200, _) => answers.ok.fetch_add(1, Ordering::Relaxed),
            (status @ (429 | 503), Some(seconds)) => {
                let counter = if status == 429 {
                    &answers.refused
                } else {
                    &answers.busy
                };
                counter.fetch_add(1, Ordering::Relaxed);
                // The client honours Retry-After on the real clock, as a browser would.
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(seconds)) => {}
                    _ = stop.cancelled() => {}
                }
                0
            }
            _ => answers.other.fetch_add(1, Ordering::Relaxed),
        };
        let _ = response.bytes().await;
    }
}

/// Runs one phase: the load generator's steady load for [`PHASE`], with the storm if `storm`
/// names the API and its keys; waits until the writer has settled every position.
async fn phase(
    broker: &Broker,
    sim: &CosmosSim,
    writer: &Writer,
    storm: Option<(&str, &[String])>,
) -> Phase {
    let (writer_before, sim_before, cpu_before) =
        (writer.metrics().snapshot(), sim.stats(), cpu_seconds());
    let answers = Arc::new(Answers::default());
    let stop = CancellationToken::new();
    let clients: Vec<_> = storm
        .into_iter()
        .flat_map(|(base, keys)| keys.iter().map(move |key| (base, key)))
        .map(|(base, key)| {
            tokio::spawn(storm_client(
                base.to_string(),
                key.clone(),
                answers.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let report = fleet::run_loadgen(
        LoadgenConfig {
            target: Target::Mqtt {
                host: "127.0.0.1".to_owned(),
                port: broker.addr().port(),
            },
            drones: DRONES,
            rate: RATE,
            count: Some((RATE * PHASE.as_secs_f64()) as u64),
            duration: PHASE + Duration::from_secs(30),
            ..LoadgenConfig::default()
        },
        CancellationToken::new(),
    )
    .await
    .unwrap();
    stop.cancel();
    for client in clients {
        client.await.unwrap();
    }
    // Every position received is written or dropped before the phase's figures are read.
    let received = writer_before.counts.received + report.acked;
    eventually(
        "every position received written or dropped",
        Duration::from_secs(120),
        async || writer.metrics().snapshot().counts,
        |counts| {
            let settled = counts.written + counts.dropped.values().sum::<u64>();
            counts.received >= received && settled >= counts.received
        },
    )
    .await;
    let (writer_after, sim_after) = (writer.metrics().snapshot(), sim.stats());
    Phase {
        writer_operations: write_operations(&sim_after) - write_operations(&sim_before),
        writer_throttled: writer_after.throttled - writer_before.throttled,
        lateness_p99: lateness_p99(&writer_before, &writer_after),
        acked: report.acked,
        reads_ok: answers.ok.load(Ordering::Relaxed),
        reads_refused: answers.refused.load(Ordering::Relaxed),
        reads_busy: answers.busy.load(Ordering::Relaxed),
        reads_other: answers.other.load(Ordering::Relaxed),
        low_priority_throttled: sim_after.throttled_low_priority_operations
            - sim_before.throttled_low_priority_operations,
        cpu_s: cpu_seconds() - cpu_before,
    }
}

fn lateness_p99(before: &Snapshot, after: &Snapshot) -> f64 {
    let as_f64 = |b: &[(f64, u64)]| b.iter().map(|&(le, n)| (le, n as f64)).collect::<Vec<_>>();
    let delta = fleet::bucket_delta(
        &as_f64(&after.lateness_device),
        &as_f64(&before.lateness_device),
    );
    fleet::quantile(&delta, 0.99).expect("lateness recorded")
}

/// The writer alone, then with the storm; both phases' figures.
async fn alone_then_storm(api: Api) -> (Phase, Phase) {
    let broker = tokio::task::spawn_blocking(|| Broker::start(BrokerKind::Embedded))
        .await
        .unwrap()
        .unwrap();
    let sim = CosmosSim::builder()
        .partitions(4)
        .ru_per_sec(RU_PER_SEC)
        .start()
        .await
        .unwrap();
    sim.create_container(fleet::DATABASE, fleet::CONTAINER, fleet::DEVICE_KEY)
        .unwrap();
    seed_filler(&sim).await;
    let writer = Writer::start(fleet::writer_config(&DemoConfig::default(), &broker, &sim))
        .await
        .unwrap();
    assert!(fleet::wait_until_subscribed(&writer, Duration::from_secs(10)).await);
    let (base, keys, stop_api) = serve_api(&sim, api).await;
    let alone = phase(&broker, &sim, &writer, None).await;
    let stormed = phase(&broker, &sim, &writer, Some((&base, &keys))).await;
    for (name, p) in [("alone", &alone), ("storm", &stormed)] {
        println!(
            "{api:?} {name}: writer operations {} throttled {} ({:.2} %), lateness p99 {:.0} ms, \
             reads 200: {} 429: {} 503: {} other: {}, low-priority 429s at the endpoint {}, \
             CPU {:.1} s for {} positions ({:.2} ms each)",
            p.writer_operations,
            p.writer_throttled,
            100.0 * p.writer_throttled as f64 / p.writer_operations.max(1) as f64,
            p.lateness_p99 * 1000.0,
            p.reads_ok,
            p.reads_refused,
            p.reads_busy,
            p.reads_other,
            p.low_priority_throttled,
            p.cpu_s,
            p.acked,
            1000.0 * p.cpu_s / p.acked.max(1) as f64,
        );
    }
    stop_api.cancel();
    writer.shutdown();
    writer.wait().await.unwrap();
    sim.shutdown().await;
    (alone, stormed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a 45-s measurement for a quiet machine: the p99 lateness rise (+59, +68 ms of 100) is too close to its bound for a busy CI host (docs/performance.md)"]
async fn reads_never_starve_the_writer() {
    let (alone, storm) = tokio::time::timeout(TEST_TIMEOUT, alone_then_storm(Api::Protected))
        .await
        .expect("the test finished within its time limit");
    let rise = storm
        .writer_throttled
        .saturating_sub(alone.writer_throttled);
    assert!(
        rise as f64 <= 0.05 * storm.writer_operations as f64,
        "the writer's 429s rose by {rise} of {} operations",
        storm.writer_operations
    );
    assert!(
        storm.lateness_p99 - alone.lateness_p99 <= 0.1,
        "p99 lateness {:.3} s alone, {:.3} s in the storm",
        alone.lateness_p99,
        storm.lateness_p99
    );
    assert!(storm.reads_ok > 0, "the storm was answered");
    assert!(
        storm.reads_refused > 0,
        "the clients were refused with Retry-After once over their budget"
    );
    assert_eq!(storm.reads_other, 0, "every 429 carried Retry-After");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for docs/performance.md: the storm against the API as it was"]
async fn read_storm_without_priority_or_budgets() {
    tokio::time::timeout(TEST_TIMEOUT, alone_then_storm(Api::Unprotected))
        .await
        .expect("the test finished within its time limit");
}

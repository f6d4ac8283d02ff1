//! The read side's questions against the local Cosmos endpoint (cosmos-sim, in process, 8
//! physical partitions, 10 ms added to every request as a stand-in for a network round
//! trip, unthrottled), 1,000 drones stored as the writer stores them: "which drones are within
//! 1 km" fanned out serially and in parallel, one drone by point read, and a track of 60
//! positions on one partition. The figure is the latency of one question; each question's RU
//! and calls are printed once.

use std::time::Duration;

use cosmos::{ContainerClient, CosmosClient, CosmosConfig, Credential, MasterKey, QueryOptions};
use cosmos_sim::CosmosSim;
use criterion::{Criterion, criterion_group, criterion_main};
use fleet_api::LonLat;
use fleet_api::Reads;
use telemetry::{DocumentLayout, Position};

const PARTITIONS: usize = 8;
const DRONES: usize = 1_000;
const LATENCY: Duration = Duration::from_millis(10);
const HOME: (f64, f64) = (-122.12, 47.66);

fn position(device: &str, seq: u64, lon: f64, lat: f64, age_s: i64) -> Position {
    Position {
        device_id: device.to_owned(),
        seq,
        ts: chrono::Utc::now() - chrono::Duration::seconds(age_s),
        lat,
        lon,
        alt_m: Some(100.0),
        heading_deg: None,
        speed_mps: None,
        battery_pct: None,
        gnss: Default::default(),
    }
}

async fn setup() -> (CosmosSim, ContainerClient) {
    let sim = CosmosSim::builder()
        .partitions(PARTITIONS)
        .ru_per_sec(f64::INFINITY)
        .start()
        .await
        .expect("cosmos-sim starts");
    sim.create_container("telemetry", "positions", "/deviceId")
        .expect("container");
    let client = CosmosClient::new(CosmosConfig::new(
        sim.endpoint().parse().expect("url"),
        Credential::MasterKey(MasterKey::from_base64(sim.key()).expect("key")),
    ))
    .expect("client");
    let container = client.container("telemetry", "positions");
    let layout = DocumentLayout::default();
    // Drones on a 10 km square grid around HOME; drone-0 also has an hour of history.
    let side = (DRONES as f64).sqrt().ceil() as usize;
    for i in 0..DRONES {
        let (x, y) = (
            (i % side) as f64 / side as f64,
            (i / side) as f64 / side as f64,
        );
        let pos = position(
            &format!("drone-{i}"),
            1,
            HOME.0 - 0.07 + x * 0.14,
            HOME.1 - 0.045 + y * 0.09,
            5,
        );
        let mut doc = Vec::new();
        layout.write_latest(&pos, None, &mut doc);
        container
            .upsert(pos.device_id.as_str(), &doc)
            .await
            .expect("upsert");
    }
    for seq in 1..=60 {
        let pos = position(
            "drone-0",
            seq,
            HOME.0 + seq as f64 * 1e-4,
            HOME.1,
            3600 - 60 * seq as i64,
        );
        let mut doc = Vec::new();
        layout.write_history(&pos, None, None, &mut doc);
        container.upsert("drone-0", &doc).await.expect("upsert");
    }
    sim.set_latency(LATENCY);
    (sim, container)
}

fn reads(container: &ContainerClient, parallelism: usize) -> Reads {
    Reads::new(
        container.clone(),
        QueryOptions {
            max_parallelism: parallelism,
            max_item_count: Some(1000),
        },
    )
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (_sim, container) = rt.block_on(setup());
    let here = LonLat::new(HOME.0, HOME.1, "home").expect("point");
    let since = chrono::Utc::now().timestamp_millis() - 3_600_000;
    let mut group = c.benchmark_group("fleet_api");
    group.sample_size(30);
    for (name, parallelism) in [("near_1km_serial", 1), ("near_1km_parallel", PARTITIONS)] {
        let reads = reads(&container, parallelism);
        let once = rt.block_on(reads.near(here, 1000.0)).expect("near");
        eprintln!(
            "{name}: {} drones, {:.2} RU, {} calls, {} ranges at once",
            once.value.len(),
            once.cost.request_charge,
            once.cost.calls,
            once.cost.peak_parallelism
        );
        group.bench_function(name, |b| {
            b.to_async(&rt)
                .iter(|| async { reads.near(here, 1000.0).await.expect("near") })
        });
    }
    let reads = reads(&container, PARTITIONS);
    let once = rt.block_on(reads.one("drone-0")).expect("one");
    eprintln!(
        "by_id: {:.2} RU, {} calls",
        once.cost.request_charge, once.cost.calls
    );
    group.bench_function("by_id", |b| {
        b.to_async(&rt)
            .iter(|| async { reads.one("drone-0").await.expect("one") })
    });
    let request = fleet_api::TrackRequest {
        device_id: "drone-0".to_string(),
        span: fleet_api::Span {
            since_ms: since,
            until_ms: chrono::Utc::now().timestamp_millis() + 60_000,
        },
        after: None,
        limit: 10_000,
    };
    let once = rt.block_on(reads.track(&request)).expect("track");
    eprintln!(
        "track: {} points, {:.2} RU, {} calls",
        once.value.points.len(),
        once.cost.request_charge,
        once.cost.calls
    );
    group.bench_function("track_1h", |b| {
        b.to_async(&rt)
            .iter(|| async { reads.track(&request).await.expect("track") })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! What the read side costs Cosmos DB at 1,000 drones, each reporting every 5 s, with 1, 10
//! and 100 open maps: polling the fleet every 2 s (`MAP_UPDATES=poll`, `MAP_REFRESH`'s
//! default) against the live stream (one change-feed follower for every viewer).
//!
//! Every window is the same work: 10 s of the fleet's reports (2,000 moves, written at 200
//! a second) and, when polling, 5 polls per viewer, each viewer's spread over the 2 s. The
//! read side's RU is what the endpoint charged the positions container in the window, less
//! what it charged the writes; its RU/s is that over the 10 s. The polling windows run
//! before any stream is opened (the follower starts with the first stream), and the
//! follower's snapshot query is spent before the 1-viewer window. Prints the table that
//! `docs/performance.md` holds.

mod common;

use std::time::{Duration, Instant};

use common::sse::Viewer;
use common::*;
use cosmos::ContainerClient;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::RuBudget;
use telemetry::DocumentLayout;

const DRONES: usize = 1000;
/// The fleet's reports in one window: every drone twice (every 5 s, for 10 s).
const WINDOW: Duration = Duration::from_secs(10);
const MOVES: usize = 2 * DRONES;
const POLL_EVERY: Duration = Duration::from_secs(2);

/// RU the endpoint charged the positions container so far.
fn container_ru(sim: &CosmosSim) -> f64 {
    sim.stats()
        .containers
        .iter()
        .filter(|c| c.container == "positions")
        .flat_map(|c| &c.partitions)
        .map(|p| p.ru_total)
        .sum()
}

/// Writes [`MOVES`] moves of the fleet paced over [`WINDOW`], each drone a little further
/// east in `round`; what the writes were charged, and the last move (drone, seq).
async fn moves(c: &ContainerClient, points: &[(f64, f64)], round: u64) -> (f64, (String, u64)) {
    let start = tokio::time::Instant::now();
    let mut charge = 0.0;
    let mut last = (String::new(), 0);
    for i in 0..MOVES {
        tokio::time::sleep_until(start + WINDOW.mul_f64(i as f64 / MOVES as f64)).await;
        let d = i % DRONES;
        let step = round * 2 + (i / DRONES) as u64;
        let (lon, lat) = points[d];
        let device = format!("drone-{d}");
        let seq = 100 + step;
        let pos = position(
            &device,
            seq,
            (lon + 0.0001 * step as f64, lat),
            Duration::ZERO,
        );
        let doc = DocumentLayout::default().latest(&pos, None);
        charge += c
            .upsert(device.as_str(), &serde_json::to_vec(&doc).unwrap())
            .await
            .unwrap()
            .request_charge;
        last = (device, seq);
    }
    (charge, last)
}

/// The moving fleet and the API that serves it.
struct Fleet {
    sim: CosmosSim,
    c: ContainerClient,
    base: String,
    points: Vec<(f64, f64)>,
}

impl Fleet {
    /// RU/s of `viewers` maps polling while the fleet moves, in window `round`.
    async fn polling(&self, viewers: usize, round: u64) -> f64 {
        let Fleet {
            sim,
            c,
            base,
            points,
        } = self;
        let before = container_ru(sim);
        let polls: Vec<_> = (0..viewers)
            .map(|v| {
                let url = format!("{base}/api/drones");
                tokio::spawn(async move {
                    let start =
                        tokio::time::Instant::now() + POLL_EVERY.mul_f64(v as f64 / viewers as f64);
                    for n in 0..(WINDOW.as_secs() / POLL_EVERY.as_secs()) {
                        tokio::time::sleep_until(start + POLL_EVERY * n as u32).await;
                        let got = get(&url).await;
                        assert_eq!(got.status, 200, "{}", got.body);
                        assert_eq!(got.body["features"].as_array().unwrap().len(), DRONES);
                    }
                })
            })
            .collect();
        let (writes, _) = moves(c, points, round).await;
        for poll in polls {
            poll.await.unwrap();
        }
        (container_ru(sim) - before - writes) / WINDOW.as_secs_f64()
    }

    /// RU/s of the follower serving `viewers` open streams while the fleet moves, in window
    /// `round`; each viewer reads every event up to the window's last move.
    async fn streaming(&self, viewers: usize, round: u64) -> f64 {
        let Fleet {
            sim,
            c,
            base,
            points,
        } = self;
        let (tx, _) = tokio::sync::broadcast::channel::<(String, u64)>(1);
        // Each viewer says when it has the last move: the follower's reads are over once
        // the first has it (the others are served from memory, however long that takes on
        // a busy machine).
        let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut readers = Vec::new();
        for _ in 0..viewers {
            let mut viewer = Viewer::open(base, None).await;
            assert_eq!(viewer.next().await.name, "snapshot");
            let mut last = tx.subscribe();
            let done_tx = done_tx.clone();
            readers.push(tokio::spawn(async move {
                let (device, seq) = last.recv().await.unwrap();
                loop {
                    let event = viewer.next().await;
                    if event.name == "position"
                        && event.data["id"] == device.as_str()
                        && event.data["properties"]["seq"] == seq
                    {
                        let _ = done_tx.send(());
                        return;
                    }
                }
            }));
        }
        let before = container_ru(sim);
        let (writes, last) = moves(c, points, round).await;
        let caught_up = Instant::now();
        tx.send(last).unwrap();
        tokio::time::timeout(Duration::from_secs(60), done.recv())
            .await
            .expect("a viewer sees the last move");
        let read = container_ru(sim) - before - writes;
        for reader in readers {
            tokio::time::timeout(Duration::from_secs(60), reader)
                .await
                .expect("every viewer sees the last move")
                .unwrap();
        }
        eprintln!(
            "  {viewers} viewers had the last move {:?} after it was written",
            caught_up.elapsed()
        );
        read / WINDOW.as_secs_f64()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_viewers_of_the_stream_cost_what_one_does_and_far_less_than_polling() {
    let sim = CosmosSim::unthrottled().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let points = scatter(DRONES, 0xc057);
    seed_latest(&c, &points).await;
    // Every poll must reach Cosmos DB: no per-caller budget, no cap on fan-outs at once.
    let options = ApiOptions {
        ru_per_sec_per_identity: RuBudget::Off,
        max_concurrent_queries: 4096,
        // The viewers are many maps, all from this host's one address.
        max_concurrent_queries_per_identity: 4096,
        stream_max_clients_per_identity: 100_000,
        ..ApiOptions::default()
    };
    let (base, _stop) = serve(c.clone(), options).await;
    let fleet = Fleet {
        sim,
        c,
        base,
        points,
    };

    let mut rows = Vec::new();
    for (round, viewers) in [1, 10, 100].into_iter().enumerate() {
        rows.push(("poll", viewers, fleet.polling(viewers, round as u64).await));
    }
    // The follower starts with the first stream, and reads its snapshot then.
    for (round, viewers) in [1, 10, 100].into_iter().enumerate() {
        rows.push((
            "stream",
            viewers,
            fleet.streaming(viewers, 3 + round as u64).await,
        ));
    }
    eprintln!("read side, {DRONES} drones each reporting every 5 s: RU/s by viewers");
    for (how, viewers, ru) in &rows {
        eprintln!("  {how:>6} {viewers:>3} viewers: {ru:>8.1} RU/s");
    }
    let ru = |how: &str, viewers: usize| {
        rows.iter()
            .find(|r| r.0 == how && r.1 == viewers)
            .unwrap()
            .2
    };
    let (one, hundred) = (ru("stream", 1), ru("stream", 100));
    assert!(
        (hundred - one).abs() <= 0.1 * one,
        "the stream at 100 viewers cost {hundred:.1} RU/s, at 1 viewer {one:.1}"
    );
    assert!(
        ru("poll", 10) >= 10.0 * hundred.max(one),
        "polling at 10 viewers cost {:.1} RU/s, the stream {:.1}",
        ru("poll", 10),
        hundred.max(one)
    );
}

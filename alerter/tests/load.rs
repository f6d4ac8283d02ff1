//! The load tool behind the alerter's figures (ignored in ordinary runs): 1,000 drones
//! reporting every 5 s (200 latest-document writes per second) into the local endpoint (4
//! ranges), each drone crossing the test fence now and then, one alerter following them. It
//! prints, over the measured window, the changes judged per second, the alerter's CPU
//! seconds per change, and the RU per second by purpose (leases, state, feed, sweep).
//!
//! ```sh
//! cargo test -p alerter --test load -- --ignored --nocapture
//! # a release binary (the test harness stays a debug build):
//! ALERTER_BIN=target/release/alerter cargo test -p alerter --test load -- --ignored --nocapture
//! ```
//! `ALERT_LOAD_SECS` sets the measured window (default 60), after 15 s of warm-up.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

const DRONES: usize = 1000;
const EVERY: Duration = Duration::from_secs(5);

const RULES: &str = r#"{"rules":[
    {"name":"corridor","kind":"geofence","marginM":20},
    {"name":"silent","kind":"silent","silentAfter":"30s","airborneAboveM":5},
    {"name":"battery","kind":"battery","belowPct":20}]}"#;

/// Drone `i`'s position at report `k`: west to east and back over 2 km, 40 m per report,
/// through the 750 m fence; the battery running down from 100 % over 400 reports.
fn fix(i: usize, k: u64) -> Fix {
    let span = 2000.0;
    let x = (k as f64 * 40.0 + i as f64 * 97.0) % (2.0 * span);
    let metres = if x < span { x } else { 2.0 * span - x };
    Fix {
        battery: Some(100u8.saturating_sub(((k + i as u64) % 400 / 4) as u8)),
        ..at(FENCE_WEST - 600.0 * LON_PER_M + metres * LON_PER_M)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a load tool: run with --ignored --nocapture"]
async fn thousand_drones_every_five_seconds() {
    let window = Duration::from_secs(
        std::env::var("ALERT_LOAD_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    );
    let bench = Arc::new(Bench::start().await);
    bench.fence("f1").await;
    let hook = Hook::start().await;
    let rules = bench.rules(RULES);
    let alerter = Alerter::start(
        &bench,
        "a",
        &hook,
        &rules,
        &[
            ("ALERT_FEED_POLL", "1s"),
            ("ALERT_LEASE_INTERVAL", "10s"),
            ("ALERT_LEASE_EXPIRY", "60s"),
            ("ALERT_SILENT_SWEEP", "10s"),
            ("RUST_LOG", "alerter=warn"),
        ],
    );
    // Each drone reports every EVERY, spread evenly: a batch of 20 every 100 ms.
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = tokio::spawn({
        let bench = bench.clone();
        let written = written.clone();
        async move {
            let start = Instant::now();
            let slot = EVERY / (DRONES as u32 / 20);
            for tick in 0u64.. {
                let due = start + slot * tick as u32;
                tokio::time::sleep_until(due.into()).await;
                let k = tick / (DRONES as u64 / 20);
                let first = (tick as usize % (DRONES / 20)) * 20;
                let writes = (first..first + 20).map(|i| {
                    let bench = bench.clone();
                    async move { bench.fly(&format!("drone-{i:04}"), k + 1, fix(i, k)).await }
                });
                futures::future::join_all(writes).await;
                written.fetch_add(20, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    // Warm-up on the real clock: the fleet's pace, before the measured window.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let snapshot = async || {
        (
            Instant::now(),
            written.load(std::sync::atomic::Ordering::Relaxed) as f64,
            alerter.cpu_seconds(),
            alerter.metric("alerter_changes_total").await,
            [
                alerter
                    .metric("alerter_request_charge_total{purpose=\"leases\"}")
                    .await,
                alerter
                    .metric("alerter_request_charge_total{purpose=\"state\"}")
                    .await,
                alerter
                    .metric("alerter_request_charge_total{purpose=\"feed\"}")
                    .await,
                alerter
                    .metric("alerter_request_charge_total{purpose=\"sweep\"}")
                    .await,
            ],
            alerter.metric("alerter_alerts_total").await,
        )
    };
    let before = snapshot().await;
    // The measured window, on the real clock (rates per second).
    tokio::time::sleep(window).await;
    let after = snapshot().await;
    writer.abort();
    let secs = (after.0 - before.0).as_secs_f64();
    let written = (after.1 - before.1) / secs;
    let cpu = after.2 - before.2;
    let changes = after.3 - before.3;
    let ru: Vec<f64> = (0..4).map(|i| (after.4[i] - before.4[i]) / secs).collect();
    println!(
        "window {secs:.1} s: {written:.1} written/s, {:.1} changes/s judged, alerts {:.2}/s, alerter CPU {cpu:.2} s = {:.1} µs per change ({:.2} % of a core)",
        changes / secs,
        (after.5 - before.5) / secs,
        cpu / changes * 1e6,
        cpu / secs * 100.0
    );
    println!(
        "RU/s: leases {:.2}, state {:.2}, feed {:.2}, sweep {:.2}",
        ru[0], ru[1], ru[2], ru[3]
    );
    assert!(
        changes / secs > written * 0.9,
        "the alerter kept up: {:.1}/s judged, {written:.1}/s written",
        changes / secs
    );
    assert!(hook.bad().is_empty());
}

//! The writer renewing its Event Hubs token while it runs: the local hub plays a namespace
//! that takes Entra ID tokens and ends a connection's links once its token expired
//! unrenewed, as Event Hubs does; the local issuer makes 7-minute tokens, so the SDK (which
//! renews 6 minutes ahead, through the writer's credential, which asks the issuer again for
//! a token with less than 7 minutes left) puts a fresh token about every minute. For 10 minutes a round of positions is routed
//! every 5 s: no link is dropped for an expired token, the writer's session never breaks,
//! and every position ends in Cosmos DB.
//!
//! Ten minutes: a run for `docs/performance.md`, not for the test command
//! (`cargo test -p cloud-writer --test token_renewal -- --ignored --nocapture`).

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};
use test_harness::eventually;

use chrono::Utc;
use common::entra::{WRITER, namespace_and_account, reader, token_settings, workload_identity};
use common::*;
use entra_sim::EntraSim;
use hub_sim::EventHubsRole;
use hub_sim::{AuthMethod, Incoming};

const TOKEN_LIFETIME: Duration = Duration::from_secs(7 * 60);
const RUN: Duration = Duration::from_secs(10 * 60);
const DRONES: usize = 20;

/// The writer's session breaks, summed over causes.
fn session_breaks(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("cloud_writer_eventhubs_session_breaks_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[ignore = "a 10-minute run for docs/performance.md"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_renews_its_token_every_minute_without_a_break() {
    let (entra, dir) = workload_identity(EntraSim::builder().token_lifetime(TOKEN_LIFETIME)).await;
    let oid = entra.object_id(WRITER).unwrap().to_owned();
    let (hub, sim) = namespace_and_account(&entra, dir.path()).await;
    hub.assign_role(&oid, Some(EventHubsRole::Receiver))
        .unwrap();
    let settings = token_settings(&hub, &sim);
    let writer = cloud_writer::Writer::start(settings.resolve().unwrap())
        .await
        .unwrap();

    let started = Instant::now();
    let mut expected = HashMap::new();
    let mut seq = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(5));
    while started.elapsed() < RUN {
        ticker.tick().await;
        seq += 1;
        let now = Utc::now();
        for d in 0..DRONES {
            let id = device(d);
            let mut message = Incoming::new(&id, wire(&id, seq, now, 47.6, -122.3));
            message.auth = AuthMethod::Sas;
            hub.partitions().route(message);
            expected.insert(id, (now.timestamp_millis(), seq, 47.6, -122.3));
        }
        if seq % 12 == 0 {
            let stats = hub.stats();
            eprintln!(
                "{:>4} s: tokens accepted {}, links dropped {:?}, writer session breaks {}",
                started.elapsed().as_secs(),
                stats.amqp_tokens_accepted,
                stats.amqp_links_dropped,
                session_breaks(&writer.metrics().render())
            );
        }
    }
    let routed = seq * DRONES as u64;
    let counts = eventually(
        "every routed position to have a final outcome",
        Duration::from_secs(60),
        async || writer.counts(),
        |c| c.received >= routed && c.finished() >= routed && c.in_flight == 0,
    )
    .await;
    assert_eq!(counts.received, routed, "nothing read twice: {counts:?}");
    assert_newest(
        &latest_documents(&reader(&sim.endpoint(), "hub")).await,
        &expected,
    );
    let stats = hub.stats();
    assert_eq!(
        stats.amqp_links_dropped.get("token_expired"),
        None,
        "a link outlived its token: {stats:?}"
    );
    // A token for each link at the start, then a fresh one for each about every minute:
    // more than one a minute after the first.
    let renewals_at_least = RUN.as_secs() / 60 - 1;
    assert!(stats.amqp_tokens_accepted > renewals_at_least, "{stats:?}");
    assert_eq!(session_breaks(&writer.metrics().render()), 0);
    writer.shutdown();
    writer.wait().await.unwrap();
    hub.shutdown().await;
}

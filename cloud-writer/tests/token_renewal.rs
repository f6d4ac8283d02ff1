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

use chrono::Utc;
use cloud_writer::Secret;
use common::entra::{WRITER, reader, workload_identity};
use common::*;
use cosmos_sim::{CosmosSim, DataRole, EntraTrust};
use entra_sim::EntraSim;
use hub_sim::partitions::{AuthMethod, Incoming};
use hub_sim::{EventHubsRole, HubConfig, HubSim};
use settings::CosmosAuth;

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
    let mut config = HubConfig::new(dir.path().join("hub"));
    config.entra = Some(hub_sim::EntraTrust {
        issuer: entra.issuer(),
        tenant_id: entra.tenant_id().to_owned(),
        ca_pem: entra.ca_pem().map(str::to_owned),
        roles: HashMap::new(),
        local_auth: false,
    });
    let hub = HubSim::start(config).await.unwrap();
    hub.assign_role(&oid, Some(EventHubsRole::Receiver))
        .unwrap();
    let sim = CosmosSim::builder()
        .partitions(2)
        .ru_per_sec(f64::INFINITY)
        .entra(EntraTrust::new(entra.issuer(), entra.tenant_id()).ca_pem(entra.ca_pem().unwrap()))
        .role_assignment(&oid, DataRole::Contributor)
        .start()
        .await
        .unwrap();
    sim.create_container("telemetry", "hub", "/deviceId")
        .unwrap();
    sim.create_container("telemetry", "checkpoints", "/scope")
        .unwrap();
    let mut settings = settings(&sim.endpoint(), "mqtt://unused:1883", "hub");
    settings.cosmos_auth = Some(CosmosAuth::Entra);
    settings.cosmos_key = None;
    settings.cosmos_create_if_missing = None;
    settings.writer_source = Some(Secret::new(format!(
        "sb://localhost/{}",
        hub.config().hub_name
    )));
    settings.eventhubs_custom_endpoint =
        Some(format!("amqp://{}", hub.amqp_addr()).parse().unwrap());
    settings.eventhubs_start_position = Some("earliest".into());
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
    let counts = wait_until(
        "every routed position to have a final outcome",
        Duration::from_secs(60),
        || writer.counts(),
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

//! The same flow against `@vercel/cosmosdb-server`, an independent Cosmos DB
//! implementation. It has no Patch in batches: with NEWEST_WINS=etag, and with the default
//! settings, where the writer finds that out at start and falls back to the ETag mode.

mod common;

use std::time::Duration;

use chrono::Utc;
use cloud_writer::DropReason;
use cloud_writer::NewestWins;
use common::*;
use test_harness::{CosmosDbServer, Mosquitto, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_to_cosmosdb_server_keeps_the_newest_position_of_each_drone() {
    run(Some(NewestWins::Etag), "vercel").await;
}

/// What a new user does: no NEWEST_WINS. The writer must not drop a thing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_to_cosmosdb_server_with_default_settings_loses_nothing() {
    let writer_fell_back = run(None, "defaults").await;
    assert!(writer_fell_back);
}

/// Runs the fleet scenario through a writer; whether the writer fell back to the ETag mode.
async fn run(newest_wins: Option<NewestWins>, name: &str) -> bool {
    let broker = Mosquitto::start().unwrap();
    let server = CosmosDbServer::start().unwrap();
    let mut settings = settings(&server.endpoint(), &broker.url(), name);
    settings.newest_wins = newest_wins;
    let writer = start_writer(settings).await;

    let s = scenario(300, 6, Utc::now());
    publish(broker.port(), &format!("fleet-{name}"), &s.messages).await;
    let total = s.messages.len() as u64;
    let counts = eventually(
        "every message to have a final outcome",
        Duration::from_secs(60),
        async || writer.counts(),
        |c| c.finished() == total && c.in_flight == 0,
    )
    .await;
    assert_eq!(
        counts.written + counts.dropped(DropReason::Superseded),
        s.fresh,
        "{counts:?}\n{}",
        server.log()
    );
    assert_eq!(counts.dropped(DropReason::Stale), s.stale);
    assert_eq!(counts.dropped(DropReason::Invalid), s.invalid);
    assert_eq!(counts.dropped(DropReason::Spoofed), s.spoofed);
    assert_eq!(counts.dropped(DropReason::WriteFailed), 0);
    assert_eq!(counts.dropped(DropReason::StaleInRetry), 0);
    let docs = latest_documents(&container(&server.endpoint(), "telemetry", name)).await;
    assert_newest(&docs, &s.expected);
    let fell_back = writer
        .metrics()
        .render()
        .contains("cloud_writer_newest_wins_fallback 1");
    writer.shutdown();
    writer.wait().await.unwrap();
    fell_back
}

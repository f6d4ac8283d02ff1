//! The same flow against `@vercel/cosmosdb-server`, an independent Cosmos DB
//! implementation. It has no Patch in batches, so the writer runs with NEWEST_WINS=etag.

mod common;

use std::time::Duration;

use chrono::Utc;
use cloud_writer::config::NewestWins;
use common::*;
use test_harness::{CosmosDbServer, Mosquitto};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_to_cosmosdb_server_keeps_the_newest_position_of_each_drone() {
    let broker = Mosquitto::start().unwrap();
    let server = CosmosDbServer::start().unwrap();
    let mut settings = settings(&server.endpoint(), &broker.url(), "vercel");
    settings.newest_wins = Some(NewestWins::Etag);
    let writer = start_writer(settings).await;

    let s = scenario(300, 6, Utc::now());
    publish(broker.port(), "fleet-vercel", &s.messages).await;
    let total = s.messages.len() as u64;
    let counts = wait_until(
        "every message to have a final outcome",
        Duration::from_secs(60),
        || writer.counts(),
        |c| c.finished() == total && c.in_flight == 0,
    )
    .await;
    assert_eq!(
        counts.written + counts.dropped("superseded"),
        s.fresh,
        "{counts:?}\n{}",
        server.log()
    );
    assert_eq!(counts.dropped("stale"), s.stale);
    assert_eq!(counts.dropped("invalid"), s.invalid);
    assert_eq!(counts.dropped("spoofed"), s.spoofed);
    assert_eq!(counts.dropped("write_failed"), 0);
    let docs = latest_documents(&container(&server.endpoint(), "telemetry", "vercel")).await;
    assert_newest(&docs, &s.expected);
    writer.shutdown();
    writer.wait().await.unwrap();
}

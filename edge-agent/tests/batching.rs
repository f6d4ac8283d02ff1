//! `PUBLISH_EVERY` on a real broker (Mosquitto): the samples since the last publish go in
//! one batch of at most 4 KB, nothing is lost across a broker outage, and after the
//! reconnect the newest position goes first. The binary runs with `REPORT_INTERVAL=5s
//! PUBLISH_EVERY=30s`; the other tests scale those down by 25 (a sample every 200 ms, a
//! publish every 1.2 s).

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use edge_agent::ConnectionState;
use test_harness::Mosquitto;

const SAMPLE: Duration = Duration::from_millis(200);
const PUBLISH: Duration = Duration::from_millis(1200);

fn batching_config(device: &str, port: u16, dir: &std::path::Path) -> edge_agent::AgentConfig {
    let mut config = sim_config(device, port, dir);
    config.report_interval = SAMPLE;
    config.publish_every = Some(PUBLISH);
    config
}

/// Whether `received` holds every seq of `1..=last`.
fn all_of(received: &[Received], last: u64) -> bool {
    let seen: BTreeSet<u64> = received
        .iter()
        .flat_map(|r| r.positions.iter().map(|p| p.seq))
        .collect();
    (1..=last).all(|seq| seen.contains(&seq))
}

#[tokio::test]
async fn one_message_per_publish_interval_holds_every_sample_since_the_last() {
    let broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-batches").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Running::start(batching_config("drone-b1", broker.port(), dir.path()));

    let received = subscriber.until(|all| all.len() >= 5).await;
    let status = agent.stop().await;
    assert_eq!(status.dropped, Default::default());

    // The first message may be the sample taken before the link was up; every later one
    // is a publish interval's worth of samples (6), in order, none missing or repeated.
    let seqs: Vec<u64> = received
        .iter()
        .flat_map(|r| r.positions.iter().map(|p| p.seq))
        .collect();
    let first = seqs[0];
    assert_eq!(
        seqs,
        (first..first + seqs.len() as u64).collect::<Vec<_>>(),
        "every sample once, in order"
    );
    for message in &received[1..] {
        assert_eq!(message.positions.len(), 6, "{message:?}");
        assert!(message.bytes < 4096, "{} bytes", message.bytes);
        // The device times of one batch: a sample interval apart.
        let times: Vec<_> = message.positions.iter().map(|p| p.ts).collect();
        for pair in times.windows(2) {
            let gap = (pair[1] - pair[0]).to_std().unwrap();
            assert!(gap >= SAMPLE / 2 && gap < PUBLISH, "{times:?}");
        }
    }
}

#[tokio::test]
async fn a_broker_outage_loses_no_batched_position_and_the_newest_goes_first() {
    let mut broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-batch-outage").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Running::start(batching_config("drone-b2", broker.port(), dir.path()));
    agent
        .wait_for("a batch acknowledged", |s| s.acked >= 6)
        .await;

    broker.stop().unwrap();
    let down = agent
        .wait_for("the outage to be noticed", |s| {
            s.connection != ConnectionState::Connected
        })
        .await;
    // Three publish intervals' worth of samples pile up on disk.
    let before = agent
        .wait_for("buffered positions", |s| s.generated >= down.generated + 18)
        .await;
    let newest_before = before.next_seq - 1;
    broker.restart().unwrap();
    let done = agent
        .wait_for("the backlog to drain", |s| {
            s.connection == ConnectionState::Connected
                && s.connections >= 2
                && s.buffer_depth <= 6
                && s.acked > before.acked
        })
        .await;
    let received = subscriber.until(|all| all_of(all, newest_before + 1)).await;
    let status = agent.stop().await;
    assert_eq!(status.dropped, Default::default());
    assert!(done.next_seq > newest_before);

    // What the agent published on the second link, the broker's own redeliveries (DUP)
    // left out: its messages are the first to carry a position made in the outage.
    let published: Vec<&Received> = received.iter().filter(|r| !r.dup).collect();
    let link = published
        .iter()
        .position(|r| r.positions.iter().any(|p| p.seq > down.next_seq))
        .expect("the second link published");
    let first = &published[link];
    assert!(
        first.positions.iter().any(|p| p.seq >= newest_before),
        "the newest position first: {:?}",
        first.positions.iter().map(|p| p.seq).collect::<Vec<_>>()
    );
    // The backlog went in batches of up to 4 KB, each position once.
    let later = &published[link + 1..];
    assert!(
        later.iter().any(|r| r.positions.len() > 6),
        "a backlog batch bigger than a publish interval's: {:?}",
        later.iter().map(|r| r.positions.len()).collect::<Vec<_>>()
    );
    let mut on_link: Vec<u64> = published[link..]
        .iter()
        .flat_map(|r| r.positions.iter().map(|p| p.seq))
        .collect();
    let count = on_link.len();
    on_link.sort_unstable();
    on_link.dedup();
    assert_eq!(
        on_link.len(),
        count,
        "each position once on the second link"
    );
    assert!(published.iter().all(|r| r.bytes < 4096));
}

#[tokio::test]
async fn the_binary_with_publish_every_30s_publishes_six_positions_every_30s() {
    let broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-batch-cli").await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .arg("run")
        .env_clear()
        .env("POSITION_SOURCE", "sim")
        .env("MQTT_URL", broker.url())
        .env("DEVICE_ID", "drone-every-30s")
        .env("BUFFER_DIR", dir.path())
        .env("REPORT_INTERVAL", "5s")
        .env("PUBLISH_EVERY", "30s")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Until two full batches: the first message may be the sample taken as the link came
    // up. The subscriber's own timeout (20 s a message) would cut a 30 s wait short.
    let mut arrivals: Vec<(Instant, Received)> = Vec::new();
    while arrivals
        .iter()
        .filter(|(_, r)| r.positions.len() == 6)
        .count()
        < 2
    {
        let message = tokio::time::timeout(Duration::from_secs(45), subscriber.rx.recv())
            .await
            .expect("a publish within 45 s")
            .unwrap();
        arrivals.push((Instant::now(), message));
    }
    let (last_at, last) = arrivals.last().unwrap();
    let (before_at, before) = &arrivals[arrivals.len() - 2];
    let gap = *last_at - *before_at;
    assert!(
        gap > Duration::from_secs(25) && gap < Duration::from_secs(35),
        "{gap:?} between publishes"
    );
    assert_eq!(last.positions.len(), 6);
    assert!(last.bytes < 4096, "{} bytes", last.bytes);
    // Every sample since the last publish, 5 s apart, the oldest held at most 30 s.
    assert_eq!(last.positions[0].seq, before.position.seq + 1);
    for pair in last.positions.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq + 1);
        let apart = (pair[1].ts - pair[0].ts).to_std().unwrap();
        assert!(apart > Duration::from_millis(4500) && apart < Duration::from_millis(5500));
    }
    let held = (chrono::Utc::now() - last.positions[0].ts)
        .to_std()
        .unwrap();
    assert!(held <= Duration::from_secs(31), "held {held:?}");
}

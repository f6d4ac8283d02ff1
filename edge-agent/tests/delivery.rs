//! End to end on a real Mosquitto: a message every interval with the IoT Hub topic and
//! properties; nothing lost across a broker outage and an agent restart, newest first;
//! a full buffer drops the oldest; a corrupted buffer file is reported and skipped.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use common::{INTERVAL, Running, Subscriber, sim_config};
use edge_agent::ConnectionState;
use edge_agent::DiskBuffer;
use test_harness::Mosquitto;

const PREFIX: &str =
    "devices/drone-t1/messages/events/$.ct=application%2Fjson&$.ce=utf-8&iothub-creation-time-utc=";

#[tokio::test]
async fn a_message_every_interval_with_topic_properties_and_payload() {
    let broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-every").await;
    let dir = tempfile::tempdir().unwrap();
    let config = sim_config("drone-t1", broker.port(), dir.path());
    let home = match &config.source {
        edge_agent::SourceConfig::Sim(sim) => (sim.home_lat, sim.home_lon),
        _ => unreachable!(),
    };
    let agent = Running::start(config);

    let mut received = subscriber.until(|all| all.len() >= 6).await;
    // The first message may wait for the connection and follow the second (newest
    // first); sorted, the sequence counts up from 1 without gaps.
    received.sort_by_key(|r| r.position.seq);
    for (i, message) in received.iter().enumerate() {
        let position = &message.position;
        assert_eq!(position.device_id, "drone-t1");
        assert_eq!(
            position.seq,
            i as u64 + 1,
            "seq counts up from 1 without gaps"
        );
        // The creation time property names when the message was made.
        let created = message.topic.strip_prefix(PREFIX).expect(&message.topic);
        let created = created.replace("%3A", ":");
        let created: chrono::DateTime<chrono::Utc> = created.parse().expect(&created);
        assert!((created - position.ts).num_milliseconds().abs() < 1000);
        // Within a few km of home, with the simulator's fields.
        assert!((position.lat - home.0).abs() < 0.05 && (position.lon - home.1).abs() < 0.1);
        assert!(position.alt_m.is_some() && position.heading_deg.is_some());
        assert!(position.speed_mps.is_some() && position.battery_pct.is_some());
    }
    // One message per interval: the spacing of the positions' times is the interval.
    let first = received.first().unwrap().position.ts;
    let last = received.last().unwrap().position.ts;
    let mean = (last - first).to_std().unwrap() / (received.len() as u32 - 1);
    assert!(
        mean >= INTERVAL * 7 / 10 && mean <= INTERVAL * 3,
        "mean spacing {mean:?} for an interval of {INTERVAL:?}"
    );

    let status = agent
        .wait_for("acknowledgements", |s| s.acked >= 6 && s.buffer_depth <= 1)
        .await;
    assert_eq!(status.connection, ConnectionState::Connected);
    assert!(status.last_fix_age_ms.is_some());
    assert_eq!(status.dropped, Default::default());
    agent.stop().await;
}

#[tokio::test]
async fn broker_outage_and_agent_restart_lose_nothing_and_send_the_newest_first() {
    let mut broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-outage").await;
    let dir = tempfile::tempdir().unwrap();
    let config = sim_config("drone-t1", broker.port(), dir.path());

    // Connected: a few messages go through.
    let first_run = Running::start(config.clone());
    first_run
        .wait_for("first acknowledgements", |s| s.acked >= 3)
        .await;

    // The broker goes away; positions pile up on disk.
    broker.stop().unwrap();
    let down = first_run
        .wait_for("the outage to be noticed", |s| {
            s.connection != ConnectionState::Connected
        })
        .await;
    first_run
        .wait_for("buffered positions", |s| s.generated >= down.generated + 5)
        .await;
    let first_status = first_run.stop().await;
    // What the first run left unacknowledged (oldest first).
    let left_over: Vec<u64> = DiskBuffer::open(&config.buffer)
        .unwrap()
        .pending_from(0)
        .collect();
    assert_eq!(left_over.len() as u64, first_status.buffer_depth);

    // The agent restarts in the middle of the outage and goes on buffering.
    let second_run = Running::start(config);
    let restarted = second_run
        .wait_for("positions after the restart", |s| s.generated >= 4)
        .await;
    assert_eq!(
        restarted.next_seq,
        first_status.next_seq + restarted.generated,
        "seq continues after the restart"
    );

    broker.restart().unwrap();
    let done = second_run
        .wait_for("the backlog to drain", |s| {
            s.connection == ConnectionState::Connected && s.buffer_depth == 0 && s.acked >= 1
        })
        .await;
    let last_seq = done.next_seq - 1;
    let received = subscriber
        .until(|all| {
            let seen: BTreeSet<u64> = all.iter().map(|r| r.position.seq).collect();
            (1..=last_seq).all(|seq| seen.contains(&seq))
        })
        .await;
    let status = second_run.stop().await;
    assert_eq!(
        status.connections, 1,
        "one link in the second run: {status:?}"
    );

    // Every position was delivered at least once (checked by `until` above). What the
    // agent published, in order: the broker's own redeliveries to this subscriber
    // (DUP) left out. The second run's link starts with its first position newer than
    // anything of the first run.
    let seqs: Vec<u64> = received
        .iter()
        .filter(|r| !r.dup)
        .map(|r| r.position.seq)
        .collect();
    let split = seqs
        .iter()
        .position(|seq| *seq >= first_status.next_seq)
        .expect("the second run published");
    let (_, link) = seqs.split_at(split);
    // The promise (README, "Order after a reconnect"): the newest buffered position
    // first, made before the broker came back ...
    let newest = link[0];
    assert!(
        newest >= restarted.next_seq - 1,
        "not the newest first: {seqs:?}"
    );
    // ... then every other buffered position exactly once, strictly oldest first,
    // interleaved only with positions made after the reconnect, in order.
    let backlog: Vec<u64> = link[1..].iter().copied().filter(|s| *s < newest).collect();
    let expected: Vec<u64> = left_over
        .iter()
        .copied()
        .chain(first_status.next_seq..newest)
        .collect();
    assert_eq!(backlog, expected, "the backlog, oldest first: {seqs:?}");
    assert!(
        expected.len() >= 8,
        "a backlog built up ({} positions): {seqs:?}",
        expected.len()
    );
    let live: Vec<u64> = link[1..].iter().copied().filter(|s| *s > newest).collect();
    let made_later: Vec<u64> = (newest + 1..newest + 1 + live.len() as u64).collect();
    assert_eq!(live, made_later, "live positions in order: {seqs:?}");
    assert_eq!(
        link.len(),
        1 + backlog.len() + live.len(),
        "each position once on the link: {seqs:?}"
    );
}

#[tokio::test]
async fn a_full_buffer_drops_the_oldest_and_counts_them() {
    let mut broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-full").await;
    broker.stop().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = sim_config("drone-t1", broker.port(), dir.path());
    config.buffer.max_bytes = 4096;
    config.report_interval = Duration::from_millis(10);
    let agent = Running::start(config);
    let full = agent
        .wait_for("drops", |s| s.dropped.buffer_full >= 10)
        .await;
    assert_eq!(full.buffer_depth + full.dropped.buffer_full, full.generated);
    assert!(full.buffer_bytes <= 4096 + 4096 / 16 + 300, "{full:?}");

    broker.restart().unwrap();
    let done = agent
        .wait_for("the backlog to drain", |s| {
            s.connection == ConnectionState::Connected && s.buffer_depth == 0 && s.acked > 0
        })
        .await;
    let status = agent.stop().await;
    let last_seq = done.next_seq - 1;
    let received = subscriber
        .until(|all| all.iter().any(|r| r.position.seq == last_seq))
        .await;
    let seqs: BTreeSet<u64> = received.iter().map(|r| r.position.seq).collect();
    // The oldest are the ones gone.
    assert!(!seqs.contains(&1), "{seqs:?}");
    let oldest_kept = *seqs.first().unwrap();
    assert!(oldest_kept > full.dropped.buffer_full.min(status.dropped.buffer_full) / 2);
}

#[tokio::test]
async fn a_corrupted_buffer_file_is_reported_and_the_agent_goes_on() {
    let mut broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-corrupt").await;
    broker.stop().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = sim_config("drone-t1", broker.port(), dir.path());

    // Five positions buffered while the broker is down.
    let agent = Running::start(config.clone());
    agent
        .wait_for("buffered positions", |s| s.generated >= 5)
        .await;
    let stopped = agent.stop().await;

    // Damage the third record on disk.
    let segment = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("seg-"))
        .unwrap();
    let mut bytes = fs::read(&segment).unwrap();
    let third = find_nth(&bytes, b"EAR1", 2);
    bytes[third + 40] ^= 0x55;
    fs::write(&segment, &bytes).unwrap();

    broker.restart().unwrap();
    let agent = Running::start(config);
    let status = agent.handle.status();
    assert_eq!(status.dropped.corrupt, 1, "reported at start: {status:?}");
    // It goes on: the rest of the backlog and new positions arrive.
    let target = stopped.next_seq + 3;
    let received = subscriber
        .until(|all| all.iter().any(|r| r.position.seq >= target))
        .await;
    let seqs: BTreeSet<u64> = received.iter().map(|r| r.position.seq).collect();
    assert!(
        !seqs.contains(&3),
        "the damaged record is skipped: {seqs:?}"
    );
    for seq in (1..stopped.next_seq).filter(|s| *s != 3) {
        assert!(seqs.contains(&seq), "{seq} missing from {seqs:?}");
    }
    let status = agent.stop().await;
    assert_eq!(status.dropped.corrupt, 1);
}

fn find_nth(haystack: &[u8], needle: &[u8], n: usize) -> usize {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .nth(n)
        .map(|(i, _)| i)
        .expect("record present")
}

#[tokio::test]
async fn mqtt_over_websockets_delivers_the_same_messages() {
    let broker = test_harness::MosquittoConfig::default()
        .websockets(true)
        .start()
        .unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-ws").await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = sim_config("drone-t1", broker.port(), dir.path());
    config.transport.endpoint = edge_agent::Endpoint::WebSocket {
        url: format!("{}/$iothub/websocket", broker.ws_url().unwrap()),
    };
    let agent = Running::start(config);
    let received = subscriber.until(|all| all.len() >= 3).await;
    assert!(received.iter().all(|r| r.topic.starts_with(PREFIX)));
    let seqs: BTreeSet<u64> = received.iter().map(|r| r.position.seq).collect();
    assert!(seqs.contains(&1) && seqs.contains(&2), "{seqs:?}");
    agent.wait_for("acknowledgements", |s| s.acked >= 3).await;
    let status = agent.stop().await;
    assert_eq!(status.connections, 1, "{status:?}");
}

#[test]
fn impossible_timings_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sim_config("drone-t1", 1883, dir.path());
    config.report_interval = Duration::ZERO;
    assert!(matches!(
        edge_agent::Agent::new(config.clone()),
        Err(edge_agent::AgentError::Cadence(_))
    ));
    config.report_interval = INTERVAL;
    config.backlog_rate = 0.0;
    assert!(matches!(
        edge_agent::Agent::new(config.clone()),
        Err(edge_agent::AgentError::Timing(_))
    ));
    config.device_id = "no spaces allowed".into();
    assert!(matches!(
        edge_agent::Agent::new(config),
        Err(edge_agent::AgentError::DeviceId(_))
    ));
}

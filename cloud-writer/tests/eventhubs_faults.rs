//! The hub's faults under one writer on its 4 partitions (`common/hub_rig.rs`):
//!
//! - the hub's AMQP side restarted and every device connection dropped mid-stream, with
//!   edge-agent agents publishing over MQTT: the writer and the agents recover by
//!   themselves, nothing is lost;
//! - the hub's receivers stalled mid-stream (attached, delivering nothing): the writer
//!   counts the stall and reads on through a new connection, nothing lost or read again.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;
use test_harness::eventually;

use common::hub_rig::{PATIENCE, Rig, settled};
use common::replica::newest_accepted;
use edge_agent::{Agent, CancellationToken};

/// Agents publishing through the hub (SAS over TLS) into one writer: the hub's AMQP side
/// stops and every device connection drops at once, mid-stream; the agents connect again
/// and go on publishing while the writer cannot read; the AMQP side starts again and the
/// writer resumes by itself. Every drone's every seq reached the hub, and every drone ends
/// at its newest position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_and_the_agents_recover_from_a_hub_restart() {
    const AGENTS: usize = 20;
    let rig = Rig::start(AGENTS).await;
    let hub = &rig.hub;
    let state = hub.config().state_dir.clone();
    let ca = state.join("ca.pem");
    let writer = rig.sole_writer().await;

    let stop = CancellationToken::new();
    let interval: settings::DurationSetting = "200ms".parse().unwrap();
    let mut agents = Vec::new();
    let connection_strings = std::fs::read_to_string(state.join("devices.txt")).unwrap();
    for (i, cs) in connection_strings.lines().enumerate() {
        let settings = edge_agent::Settings {
            connection_string: Some(edge_agent::Secret::new(cs)),
            iothub_ca_file: Some(ca.clone()),
            iothub_port: Some(hub.mqtt_addr().port()),
            position_source: Some("sim".into()),
            sim_seed: Some(i as u64),
            report_interval: Some(interval),
            buffer_dir: Some(rig.dir.path().join(format!("agent-{i}"))),
            buffer_fsync: Some(false),
            ..edge_agent::Settings::default()
        };
        let agent = Agent::new(settings.resolve().unwrap()).unwrap();
        agents.push(tokio::spawn(agent.run(stop.clone())));
    }
    assert_eq!(agents.len(), AGENTS);
    eventually(
        "the agents' positions written",
        PATIENCE,
        async || writer.counts().await,
        |c| c.written >= 200,
    )
    .await;

    // The fault: no Event Hubs endpoint, no device connection.
    hub.stop_amqp();
    hub.drop_device_connections();
    let at_fault = hub.stats().messages_accepted;
    eventually(
        "the writer seeing the hub out of reach",
        PATIENCE,
        async || writer.counts().await,
        |c| !c.connected,
    )
    .await;
    eventually(
        "the agents connected again and publishing while the writer cannot read",
        PATIENCE,
        async || (hub.connected_devices(), hub.stats().messages_accepted),
        |(connected, accepted)| *connected == AGENTS && *accepted >= at_fault + 200,
    )
    .await;
    assert_eq!(
        hub.stats().connections_refused.get("dropped_by_fault"),
        Some(&(AGENTS as u64)),
        "{:?}",
        hub.stats()
    );
    hub.restart_amqp().await.unwrap();
    let restarted = Instant::now();
    let at_restart = hub.stats().messages_accepted;
    eventually(
        "the writer reading again past the restart",
        PATIENCE,
        async || writer.counts().await,
        |c| c.connected && c.received >= at_restart,
    )
    .await;
    eprintln!(
        "the writer read again past the restart {:.1} s after it",
        restarted.elapsed().as_secs_f64()
    );
    stop.cancel();
    for agent in agents {
        agent.await.unwrap().unwrap();
    }

    // Every seq each drone sent reached the hub (at least once), none missing.
    let mut seqs: HashMap<String, BTreeSet<u64>> = HashMap::new();
    for event in rig.events().values().flatten() {
        let body: serde_json::Value = serde_json::from_slice(&event.message.body).unwrap();
        seqs.entry(event.message.device_id.to_string())
            .or_default()
            .insert(body["seq"].as_u64().unwrap());
    }
    assert_eq!(seqs.len(), AGENTS);
    for (drone, seqs) in &seqs {
        let (first, last) = (*seqs.first().unwrap(), *seqs.last().unwrap());
        assert!(first <= 1, "{drone} starts at seq {first}");
        assert_eq!(
            seqs.len() as u64,
            last - first + 1,
            "{drone}: a seq between {first} and {last} is missing"
        );
    }
    let (expected, accepted) = newest_accepted(hub);
    let counts = settled(&rig, &writer, accepted, &expected).await;
    eprintln!(
        "hub accepted {accepted} ({} while the AMQP side was down); the writer {counts:?}: {} read again",
        at_restart - at_fault,
        counts.received - accepted
    );
    let mut writer = writer;
    writer.stop(PATIENCE).await;
    rig.shutdown().await;
}

/// A writer reading the 4 partitions under a stream; the hub stalls its receivers (they
/// stay attached and deliver nothing, as one writer's did for minutes after another's
/// AMQP session dropped). The writer sees its readers wait for events the hub holds,
/// counts the stall and reads on through a new connection: every event read exactly once,
/// every drone at its newest position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_receivers_are_replaced_through_a_new_connection() {
    let rig = Rig::start(0).await;
    let writer = rig.sole_writer().await;
    let (stop_stream, stream) = rig.stream(1);
    eventually(
        "positions written",
        PATIENCE,
        async || writer.counts().await,
        |c| c.written >= 200,
    )
    .await;
    rig.hub.stall_receivers();
    let stalled = Instant::now();
    let at_stall = rig.enqueued();
    let counts = eventually(
        "the writer reading past the stall",
        PATIENCE,
        async || writer.counts().await,
        |c| c.received > at_stall,
    )
    .await;
    eprintln!(
        "the writer read past the stall {:.1} s after it; session breaks {:?}",
        stalled.elapsed().as_secs_f64(),
        counts.session_breaks
    );
    assert_eq!(
        counts.session_breaks.get("receivers_stalled"),
        Some(&1),
        "{counts:?}"
    );
    stop_stream.cancel();
    stream.await.unwrap();
    let (expected, accepted) = newest_accepted(&rig.hub);
    let counts = settled(&rig, &writer, accepted, &expected).await;
    assert_eq!(
        (counts.received, counts.read_again),
        (accepted, 0),
        "every event read once: {counts:?}"
    );
    let mut writer = writer;
    writer.stop(PATIENCE).await;
    rig.shutdown().await;
}

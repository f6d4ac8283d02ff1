//! The production path at fleet scale: 1,000 drones publish through the local IoT Hub
//! (`crates/hub-sim`) with SAS tokens over TLS, 20 of them real `edge-agent` processes and
//! the other 980 the edge-agent library's agents in this process (the same code, as the
//! demo runs them); two `cloud-writer` processes share the hub's 4 partitions through the
//! SDK's `EventProcessor` and the Cosmos checkpoint store, and write to the local Cosmos
//! endpoint. Every drone ends at the newest position the hub accepted from it, and the
//! replicas' outcomes, summed, account for exactly what the hub accepted: received once
//! each (no session breaks, nothing read again), and written, superseded, stale or invalid
//! (no other outcome).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};
use test_harness::eventually;

use cloud_writer::DropReason;
use common::replica::{Replica, newest_accepted, terminate};
use common::{container, latest_documents};
use cosmos_sim::CosmosSim;
use edge_agent::{Agent, CancellationToken};
use hub_sim::{HubConfig, HubSim};

/// Drones in all, and how many of them are `edge-agent` processes.
const DRONES: usize = 1_000;
const PROCESSES: usize = 20;
/// Every drone reports this often, for [`FLYING`] once all are connected.
const INTERVAL: &str = "1s";
const FLYING: Duration = Duration::from_secs(15);
/// Outcomes a valid fleet's positions may have.
const EXPECTED_OUTCOMES: [DropReason; 3] = [
    DropReason::Superseded,
    DropReason::Stale,
    DropReason::Invalid,
];

/// The edge-agent binary: `EDGE_AGENT_BIN`, or the one cargo builds beside this package's
/// (`cargo test --workspace` builds both). A binary older than the agent's sources is
/// refused, so that the test never runs yesterday's agent.
fn edge_agent_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("EDGE_AGENT_BIN") {
        return path.into();
    }
    let path = Path::new(common::replica::BIN).with_file_name("edge-agent");
    let hint = "build it with `cargo build -p edge-agent` (`cargo test --workspace` does), or name one in EDGE_AGENT_BIN";
    let built = path
        .metadata()
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: {hint}", path.display()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for dir in [
        "edge-agent/src",
        "crates/telemetry/src",
        "crates/settings/src",
        "crates/client-tls/src",
    ] {
        if let Some((newest, file)) = newest_file(&root.join(dir)) {
            assert!(
                newest <= built,
                "{} is older than {}: {hint}",
                path.display(),
                file.display()
            );
        }
    }
    path
}

/// The most recently modified file under `dir`, with its time.
fn newest_file(dir: &Path) -> Option<(SystemTime, PathBuf)> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let candidate = if path.is_dir() {
            newest_file(&path)
        } else {
            entry.metadata().ok()?.modified().ok().map(|t| (t, path))
        };
        if let Some(c) = candidate
            && newest.as_ref().is_none_or(|n| c.0 > n.0)
        {
            newest = Some(c);
        }
    }
    newest
}

/// Lets this process hold the in-process drones' sockets and buffer files (and the hub's
/// side of every connection): the soft open-file limit raised to the hard one.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_drones_through_the_hub_and_two_writer_replicas() {
    raise_open_file_limit();
    let agent_bin = edge_agent_bin();
    let dir = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(dir.path().join("hub"));
    config.devices = DRONES;
    config.device_prefix = "drone-".into();
    let hub = HubSim::start(config).await.unwrap();
    let state = hub.config().state_dir.clone();
    let ca = state.join("ca.pem");
    let connection_strings: Vec<String> = std::fs::read_to_string(state.join("devices.txt"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(connection_strings.len(), DRONES);
    let sim = CosmosSim::unthrottled().await.unwrap();

    // Replica a claims the 4 partitions; replica b then takes its share (the processor's
    // greedy balancing: b claims up to 2 at once, and its receivers' owner level detaches
    // a's). The drones start only once each replica reads its 2 (a has seen 2 of its
    // receivers detached), so that no partition moves while positions flow.
    let a = Replica::start("writer-a", &hub, &sim, dir.path(), &[]);
    eventually(
        "replica a reading the 4 partitions",
        Duration::from_secs(60),
        async || a.counts().await,
        |c| c.owned.len() == 4,
    )
    .await;
    let b = Replica::start("writer-b", &hub, &sim, dir.path(), &[]);
    let started = Instant::now();
    let balanced = eventually(
        "replica b taking 2 partitions from replica a",
        Duration::from_secs(60),
        async || (a.counts().await, b.counts().await),
        |(a, b)| a.owned.len() == 2 && b.owned.len() == 2 && a.owned.is_disjoint(&b.owned),
    )
    .await;
    eprintln!(
        "partitions {:?} moved from replica a to b in {:.1} s",
        balanced.1.owned,
        started.elapsed().as_secs_f64()
    );

    // The fleet: 20 agent processes and 980 agents in this process, SAS over TLS.
    let stop = CancellationToken::new();
    let mut processes = Vec::new();
    for (i, cs) in connection_strings[..PROCESSES].iter().enumerate() {
        let child = Command::new(&agent_bin)
            .env_clear()
            .env("IOTHUB_DEVICE_CONNECTION_STRING", cs)
            .env("IOTHUB_CA_FILE", &ca)
            .env("IOTHUB_PORT", hub.mqtt_addr().port().to_string())
            .env("POSITION_SOURCE", "sim")
            .env("SIM_SEED", i.to_string())
            .env("REPORT_INTERVAL", INTERVAL)
            .env("BUFFER_DIR", dir.path().join(format!("agent-{i}")))
            .env("BUFFER_FSYNC", "false")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join(format!("agent-{i}.log"))).unwrap())
            .spawn()
            .unwrap();
        processes.push(child);
    }
    let interval: settings::DurationSetting = INTERVAL.parse().unwrap();
    let mut agents = Vec::new();
    for (i, cs) in connection_strings.iter().enumerate().skip(PROCESSES) {
        let settings = edge_agent::Settings {
            connection_string: Some(edge_agent::Secret::new(cs.as_str())),
            iothub_ca_file: Some(ca.clone()),
            iothub_port: Some(hub.mqtt_addr().port()),
            position_source: Some("sim".into()),
            sim_seed: Some(i as u64),
            report_interval: Some(interval),
            buffer_dir: Some(dir.path().join(format!("agent-{i}"))),
            buffer_fsync: Some(false),
            ..edge_agent::Settings::default()
        };
        let agent = Agent::new(settings.resolve().unwrap()).unwrap();
        // Started over one interval, so that the drones do not report in lock-step.
        let delay = interval.get().mul_f64(i as f64 / DRONES as f64);
        let stop = stop.clone();
        agents.push(tokio::spawn(async move {
            // The agents' start spread over real time, not a synchronisation.
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
            agent.run(stop).await.unwrap();
        }));
    }
    let flying = Instant::now();
    eventually(
        "every drone connected",
        Duration::from_secs(120),
        async || hub.connected_devices(),
        |n| *n == DRONES,
    )
    .await;
    eprintln!(
        "{DRONES} drones connected in {:.1} s",
        flying.elapsed().as_secs_f64()
    );
    // The flight: a fixed time once all are up (the scenario's length, not a wait for
    // something), then until every drone has had a position accepted.
    tokio::time::sleep(FLYING).await;
    eventually(
        "every drone to have published",
        Duration::from_secs(60),
        async || newest_accepted(&hub).0.len(),
        |n| *n == DRONES,
    )
    .await;

    // Land: the processes on SIGTERM, the rest by their token.
    for child in &processes {
        terminate(child);
    }
    stop.cancel();
    for agent in agents {
        agent.await.unwrap();
    }
    for mut child in processes {
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "an agent process exited with {status}");
    }

    // What the hub accepted is what was published.
    let stats = hub.stats();
    assert!(stats.messages_refused.is_empty(), "{stats:?}");
    let (expected, events) = newest_accepted(&hub);
    assert_eq!(events, stats.messages_accepted);
    assert_eq!(expected.len(), DRONES, "every drone published");
    let published = stats.messages_accepted;
    eprintln!(
        "published {published} positions in {:.1} s",
        flying.elapsed().as_secs_f64()
    );

    let counts = eventually(
        "both replicas to have a final outcome for every position",
        Duration::from_secs(120),
        async || (a.counts().await, b.counts().await),
        |(a, b)| {
            let sum = a.clone().plus(b);
            sum.received >= published && sum.settled() >= sum.received
        },
    )
    .await;
    let sum = counts.0.clone().plus(&counts.1);
    eprintln!("replica a {:?}; replica b {:?}", counts.0, counts.1);
    // In steady state no session breaks, so nothing is read again.
    assert!(
        sum.session_breaks.is_empty(),
        "no session breaks: {counts:?}"
    );
    assert_eq!(sum.read_again, 0, "nothing read again: {counts:?}");
    assert_eq!(sum.received, published, "received once each: {counts:?}");
    let others: Vec<_> = sum
        .dropped
        .keys()
        .filter(|r| !EXPECTED_OUTCOMES.contains(r))
        .collect();
    assert!(others.is_empty(), "unexpected outcomes: {counts:?}");
    assert_eq!(sum.settled(), sum.received, "{counts:?}");
    // Both replicas wrote, from their own partitions.
    assert!(counts.0.written > 0 && counts.1.written > 0, "{counts:?}");
    // No partition moved after the balancing.
    assert_eq!(counts.0.owned, balanced.0.owned, "{counts:?}");
    assert_eq!(counts.1.owned, balanced.1.owned, "{counts:?}");
    assert_eq!(
        counts.0.ownership_changes + counts.1.ownership_changes,
        balanced.0.ownership_changes + balanced.1.ownership_changes,
        "{counts:?}"
    );

    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "positions")).await;
    common::assert_newest(&docs, &expected);

    // Both replicas stop cleanly.
    let (mut a, mut b) = (a, b);
    for replica in [&mut a, &mut b] {
        terminate(&replica.child);
    }
    for replica in [&mut a, &mut b] {
        replica.exited(Duration::from_secs(60)).await;
    }
    sim.shutdown().await;
    hub.shutdown().await;
}

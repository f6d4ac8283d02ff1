//! The cloud writer as a process of its own, reading a source that was filled before the
//! clock starts and writing to the unthrottled local Cosmos endpoint (4 ranges): events
//! per second from the writer's start until every event has a final outcome, and the
//! writer process's CPU seconds per message.
//!
//! - `writer_sources/eventhubs_4_partitions`: the local IoT Hub (`crates/hub-sim`) with 4
//!   partitions, filled through its library API as the hub enqueues device messages (SAS
//!   identity, content type and encoding, the device's creation time), so that the hub's
//!   device side is not measured; read by the writer's Event Hubs source over AMQP (the
//!   SDK's `EventProcessor`, the checkpoint store in the same Cosmos account).
//! - `writer_sources/mqtt`: the same positions queued in a harness-started Mosquitto for
//!   the writer's persistent session (published at QoS 1 while the writer is away), read
//!   by the MQTT source (MQTT 5, its default Receive Maximum bounding what the broker
//!   sends it unacknowledged).
//!
//! Every iteration starts from nothing: a new hub or broker, a new endpoint, a new writer
//! process. The writer process is this bench's own executable started again with
//! [`WRITER_ROLE`] set: it runs the cloud-writer library as the `cloud-writer` binary does
//! (settings from the environment, `Writer::start`, stop on SIGTERM), so the bench needs
//! no other build and the CPU figure is the writer's alone (`utime + stime` of the process,
//! from `/proc`). The hub, the broker's clients and the endpoint run in the bench's process
//! (Mosquitto in its own), on the same two cores.
//!
//! `WRITER_SOURCES_FLEET=DRONESxPOSITIONS` sets the fleet (default 10000x20, 500x4 in CI's
//! quick mode). `WRITER_SOURCES_PROFILER` runs the writer process under a profiler that keeps the
//! process id and passes signals on: its words are put before the command, e.g.
//! `valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p` (the process's figures are
//! then the profiler's).
//!
//! Criterion's figure is the time from the writer's start (exec, connections, the
//! partitions' claims) to the last final outcome; the lines printed after each bench add
//! the rate from the first event received, the CPU per message and the outcomes.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use benches::{Publishers, selected, wire_payload};
use chrono::{DateTime, Utc};
use clap::Parser;
use cloud_writer::Settings;
use cloud_writer::internals::TOPIC_FILTER;
use cloud_writer::{DropReason, Writer, WriterConfig};
use cosmos_sim::CosmosSim;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group};
use fleet::Scrape;
use fleet::{WriterFigures, WriterScraper};
use hub_sim::{AuthMethod, Incoming};
use hub_sim::{HubConfig, HubSim};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use test_harness::Mosquitto;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Set in the environment of the writer process this bench starts.
const WRITER_ROLE: &str = "BENCH_WRITER_PROCESS";
/// A profiler command to run the writer process under (see the module's documentation).
const PROFILER: &str = "WRITER_SOURCES_PROFILER";
/// `DRONESxPOSITIONS`: another fleet than the full or the quick one (for profiling).
const FLEET: &str = "WRITER_SOURCES_FLEET";
/// Drones of a full run, and positions each (the events of a run: 200,000).
const DRONES: usize = 10_000;
const POSITIONS: u64 = 20;
/// CI's quick mode (`cargo test -p benches --benches`): 500 drones, 4 positions each.
const QUICK: (usize, u64) = (500, 4);
/// The writer's MQTT client id (its persistent session holds the queued positions).
const MQTT_WRITER_ID: &str = "bench-writer";

/// The runs' positions: `drones` drones, `positions` each, 5 s apart and ending now, in
/// the order a fleet sends them (every drone's first, then every drone's second, ...).
#[derive(Debug, Clone, Copy)]
struct Fleet {
    drones: usize,
    positions: u64,
}

impl Fleet {
    fn total(&self) -> u64 {
        self.drones as u64 * self.positions
    }

    /// Calls `each(device, seq, device time, payload)` for every position, in order.
    fn for_each(&self, mut each: impl FnMut(&str, u64, DateTime<Utc>, Vec<u8>)) {
        let now = Utc::now();
        let ids: Vec<String> = (0..self.drones).map(|d| format!("drone-{d:05}")).collect();
        for seq in 1..=self.positions {
            let ts = now - chrono::Duration::seconds(5 * (self.positions - seq) as i64);
            for id in &ids {
                each(id, seq, ts, wire_payload(id, seq, ts));
            }
        }
    }
}

/// What one run measured.
#[derive(Debug)]
struct Run {
    /// From the writer's start to the last final outcome.
    elapsed: Duration,
    /// From the first event received (as seen by the bench's scrapes) to the last outcome.
    reading: Duration,
    /// The writer process's CPU time (user + system) at the last outcome.
    cpu: Duration,
    /// This process's CPU time meanwhile: the hub or the broker's clients, the endpoint.
    peers_cpu: Duration,
    /// The writer process's peak resident set, KiB.
    peak_rss_kib: u64,
    figures: WriterFigures,
}

/// The writer's settings for a run: the source and the endpoint, every other setting at
/// its default.
fn writer_env(source: String, sim: &CosmosSim) -> Vec<(&'static str, String)> {
    vec![
        ("WRITER_SOURCE", source),
        ("COSMOS_ENDPOINT", sim.endpoint()),
        ("COSMOS_KEY", sim.key().to_owned()),
        ("COSMOS_CONTAINER", "positions".into()),
        ("COSMOS_CREATE_IF_MISSING", "true".into()),
        ("METRICS_ADDR", "127.0.0.1:0".into()),
        ("PROBE_ADDR", "off".into()),
    ]
}

/// The CPU time (user + system) of process `pid` so far, from `/proc/PID/stat`.
fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // `PID (COMM) STATE ...`: utime and stime are the 12th and 13th fields after COMM.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf(3) has no preconditions.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_secs_f64(ticks as f64 / per_sec as f64)
}

/// The CPU time (user + system) of this process so far.
fn own_cpu() -> Duration {
    process_cpu(std::process::id())
}

/// The peak resident set of process `pid`, KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Starts the writer process with `env`, waits until it has a final outcome for `total`
/// messages, reads its CPU time, stops it with SIGTERM and checks that it exits cleanly.
async fn measure(env: Vec<(&'static str, String)>, total: u64, logs: &std::path::Path) -> Run {
    let log = std::fs::File::create(logs).unwrap();
    let exe = std::env::current_exe().unwrap();
    let profiler = std::env::var(PROFILER).unwrap_or_default();
    let mut words = profiler.split_whitespace();
    let mut command = match words.next() {
        Some(program) => {
            let mut command = tokio::process::Command::new(program);
            command.args(words).arg(exe);
            command
        }
        None => tokio::process::Command::new(exe),
    };
    let start = Instant::now();
    let peers_start = own_cpu();
    let mut child = command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(WRITER_ROLE, "1")
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let fail = |why: String| -> ! {
        let log = std::fs::read_to_string(logs).unwrap_or_default();
        panic!("{why}; the writer's log:\n{log}");
    };
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = match tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await {
        Ok(Ok(Some(line))) => line
            .strip_prefix("metrics ")
            .map(str::to_owned)
            .unwrap_or_else(|| fail(format!("unexpected first line {line:?}"))),
        other => fail(format!("the writer did not start: {other:?}")),
    };
    let scraper = WriterScraper::new(&format!("http://{addr}/metrics"));
    let none = Scrape::default();
    let deadline = start + Duration::from_secs(600);
    let mut first = None;
    let figures = loop {
        let scrape = match scraper.scrape().await {
            Ok(scrape) => scrape,
            Err(err) => fail(err.to_string()),
        };
        let figures =
            WriterFigures::between(&none, &scrape).unwrap_or_else(|e| fail(e.to_string()));
        if first.is_none() && figures.received > 0 {
            first = Some(Instant::now());
        }
        if figures.settled() >= total {
            break figures;
        }
        if Instant::now() > deadline {
            fail(format!("not every message final after 600 s: {figures:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let end = Instant::now();
    let run = Run {
        elapsed: end - start,
        reading: end - first.unwrap_or(start),
        cpu: process_cpu(pid),
        peers_cpu: own_cpu() - peers_start,
        peak_rss_kib: peak_rss_kib(pid),
        figures,
    };
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    match tokio::time::timeout(Duration::from_secs(60), child.wait()).await {
        Ok(Ok(status)) if status.success() => {}
        other => fail(format!("the writer did not stop cleanly: {other:?}")),
    }
    run
}

/// Unthrottled, 4 ranges.
async fn endpoint() -> CosmosSim {
    CosmosSim::unthrottled().await.unwrap()
}

/// One run through the local hub's Event Hubs endpoint.
async fn eventhubs_run(fleet: Fleet) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let hub = HubSim::start(HubConfig::new(dir.path().join("hub")))
        .await
        .unwrap();
    let sim = endpoint().await;
    fleet.for_each(|device, _, ts, payload| {
        let mut message = Incoming::new(device, payload);
        message.auth = AuthMethod::Sas;
        message.content_type = Some("application/json".into());
        message.content_encoding = Some("utf-8".into());
        message.properties = vec![(
            "iothub-creation-time-utc".into(),
            ts.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        )];
        hub.partitions().route(message);
    });
    let mut env = writer_env(hub.eventhub_connection_string(), &sim);
    env.push(("EVENTHUBS_START_POSITION", "earliest".into()));
    let run = measure(env, fleet.total(), &dir.path().join("writer.log")).await;
    sim.shutdown().await;
    hub.shutdown().await;
    run
}

/// One run through Mosquitto: the writer's session subscribed, then every position
/// published and acknowledged while the writer is away.
async fn mqtt_run(fleet: Fleet) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let broker = tokio::task::spawn_blocking(|| Mosquitto::start().unwrap())
        .await
        .unwrap();
    let sim = endpoint().await;
    subscribe_session(broker.port()).await;
    let publishers = Publishers::connect(broker.port(), 4, "bench-prefill-");
    let mut n = 0usize;
    let mut sends = Vec::new();
    fleet.for_each(|device, _, _, payload| {
        let client = publishers.clients[n % publishers.clients.len()].clone();
        let topic = format!("devices/{device}/messages/events/");
        n += 1;
        sends.push((client, topic, payload));
    });
    let total = fleet.total();
    for (client, topic, payload) in sends {
        client
            .publish(topic, QoS::AtLeastOnce, false, payload)
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while publishers.acked() < total {
        assert!(
            Instant::now() < deadline,
            "the broker did not take them all"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for client in &publishers.clients {
        let _ = client.disconnect().await;
    }
    let mut env = writer_env(broker.url(), &sim);
    env.push(("MQTT_CLIENT_ID", MQTT_WRITER_ID.into()));
    let run = measure(env, total, &dir.path().join("writer.log")).await;
    sim.shutdown().await;
    drop(broker);
    run
}

/// Makes the writer's persistent session (its client id, `clean_session = false`) with
/// its subscription, then leaves, so that the broker queues what is published meanwhile.
async fn subscribe_session(port: u16) {
    let mut options = MqttOptions::new(MQTT_WRITER_ID, "127.0.0.1", port);
    options.set_clean_session(false);
    let (client, mut eventloop) = AsyncClient::new(options, 10);
    client
        .subscribe(TOPIC_FILTER, QoS::AtLeastOnce)
        .await
        .unwrap();
    loop {
        match eventloop.poll().await.unwrap() {
            Event::Incoming(Packet::SubAck(_)) => break,
            _ => continue,
        }
    }
    client.disconnect().await.unwrap();
    // Polled until the DISCONNECT is written and the broker closes the connection.
    while eventloop.poll().await.is_ok() {}
}

/// Prints the runs' figures and checks every message's outcome.
fn report(name: &str, fleet: &Fleet, runs: &[Run]) {
    for (i, run) in runs.iter().enumerate() {
        let f = &run.figures;
        let total = fleet.total();
        eprintln!(
            "{name} run {i}: {total} events in {:.2} s from the writer's start ({:.0}/s), {:.2} s from the first received ({:.0}/s); \
             writer CPU {:.2} s = {:.2} µs per message (bench process: {:.2} s); peak RSS {} MiB; received {}, written {}, dropped {:?}",
            run.elapsed.as_secs_f64(),
            total as f64 / run.elapsed.as_secs_f64(),
            run.reading.as_secs_f64(),
            total as f64 / run.reading.as_secs_f64(),
            run.cpu.as_secs_f64(),
            run.cpu.as_secs_f64() * 1e6 / total as f64,
            run.peers_cpu.as_secs_f64(),
            run.peak_rss_kib / 1024,
            f.received,
            f.written,
            f.dropped
                .iter()
                .filter(|(_, n)| **n > 0)
                .collect::<BTreeMap<_, _>>(),
        );
        assert_eq!(f.received, total, "{f:?}");
        assert_eq!(f.settled(), total, "{f:?}");
        let not_superseded: u64 = f
            .dropped
            .iter()
            .filter(|(reason, _)| **reason != DropReason::Superseded)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(not_superseded, 0, "{f:?}");
    }
}

/// Runs `one` as a criterion bench named `writer_sources/{name}`: one writer process per
/// iteration, the runs' figures printed after.
fn bench_source<F: Future<Output = Run>>(c: &mut Criterion, name: &str, one: impl Fn(Fleet) -> F) {
    let full_name = format!("writer_sources/{name}");
    let (chosen, full) = selected(&full_name);
    if !chosen {
        return;
    }
    let (drones, positions) = match std::env::var(FLEET) {
        Ok(size) => size
            .split_once('x')
            .and_then(|(d, p)| Some((d.parse().ok()?, p.parse().ok()?)))
            .unwrap_or_else(|| panic!("{FLEET}={size:?}: expected DRONESxPOSITIONS")),
        Err(_) if full => (DRONES, POSITIONS),
        Err(_) => QUICK,
    };
    let fleet = Fleet { drones, positions };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut runs = Vec::new();
    let mut group = c.benchmark_group("writer_sources");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(fleet.total()));
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                let run = rt.block_on(one(fleet));
                elapsed += run.elapsed;
                runs.push(run);
            }
            elapsed
        });
    });
    group.finish();
    report(&full_name, &fleet, &runs);
    let cpu: f64 = runs.iter().map(|r| r.cpu.as_secs_f64()).sum();
    let messages = fleet.total() as f64 * runs.len() as f64;
    eprintln!(
        "{full_name}: {} runs, writer CPU {:.2} µs per message on average",
        runs.len(),
        cpu * 1e6 / messages
    );
}

fn eventhubs_4_partitions(c: &mut Criterion) {
    bench_source(c, "eventhubs_4_partitions", eventhubs_run);
}

fn mqtt(c: &mut Criterion) {
    bench_source(c, "mqtt", mqtt_run);
}

/// The writer process: the cloud-writer binary's `run`, configured from the environment.
fn writer_process() -> ExitCode {
    /// The binary's settings, from the environment only.
    #[derive(Parser)]
    struct FromEnv {
        #[command(flatten)]
        settings: Settings,
    }
    let given = FromEnv::parse_from(["cloud-writer"]).settings;
    let secrets = Settings::secrets_from_env().expect("secrets");
    let config: WriterConfig = settings::layer(given, secrets, None)
        .expect("the writer's settings")
        .resolve()
        .expect("the writer's settings");
    config.log_format.init_logs();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let writer = Writer::start(config).await.expect("the writer starts");
        let addr = writer.metrics_addr().expect("a metrics address");
        let mut stdout = std::io::stdout();
        writeln!(stdout, "metrics {addr}").expect("stdout");
        stdout.flush().expect("stdout");
        let stop = writer.shutdown_token();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            signal(SignalKind::terminate())
                .expect("SIGTERM handler")
                .recv()
                .await;
            stop.cancel();
        });
        match writer.wait().await {
            Ok(_) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("writer: {err}");
                ExitCode::FAILURE
            }
        }
    })
}

criterion_group!(benches, eventhubs_4_partitions, mqtt);

fn main() -> ExitCode {
    if std::env::var_os(WRITER_ROLE).is_some() {
        return writer_process();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    ExitCode::SUCCESS
}

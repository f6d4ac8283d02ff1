//! `--data-dir`: a hub restarted on the same data directory serves every event it took, over
//! AMQP to Microsoft's Rust SDK, with the same sequence numbers, offsets and enqueued times,
//! and numbers new events on from there; a torn tail is cut back; retention still applies.

mod common;

use common::device::device_options;
use common::readers::{sdk_consumer, sdk_consumer_at, sdk_read, sdk_read_while};
use hub_sim::{DataDir, Event, Incoming, Retention, stable_hash};
use hub_sim::{HubConfig, HubSim};
use rumqttc::{AsyncClient, Packet, QoS};
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use test_harness::eventually;

/// A hub on `state` keeping its partitions in `state/data`.
async fn start(state: &Path, adjust: impl FnOnce(&mut HubConfig)) -> HubSim {
    let mut config = HubConfig::new(state);
    config.data_dir = Some(DataDir::new(state.join("data")));
    adjust(&mut config);
    HubSim::start(config).await.unwrap()
}

/// Waits (generously) until partition `p` has made sequence number `last` readable.
async fn readable(hub: &HubSim, p: usize, last: i64) {
    eventually(
        &format!("partition {p} to reach {last}"),
        Duration::from_secs(60),
        async || hub.partitions().get(p).unwrap().info().last_sequence_number,
        |&n| n >= last,
    )
    .await;
}

/// Every event partition `p` keeps, read through the library.
fn kept(hub: &HubSim, p: usize) -> Vec<Arc<Event>> {
    let mut out = Vec::new();
    let partition = hub.partitions().get(p).unwrap();
    partition.read(partition.info().begin_sequence_number, usize::MAX, &mut out);
    out
}

fn message(p: usize, i: usize) -> Incoming {
    let mut message = Incoming::new(&format!("drone-{p}"), format!(r#"{{"p":{p},"i":{i}}}"#));
    message.content_type = Some("application/json".into());
    message.properties = vec![("kind".into(), format!("k{i}"))];
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_hub_serves_every_event_it_took_and_numbers_on() {
    let state = tempfile::tempdir().unwrap();
    let hub = start(state.path(), |_| {}).await;
    for p in 0..4 {
        for i in 0..400 {
            hub.partitions().append_to(p, message(p, i));
        }
    }
    for p in 0..4 {
        readable(&hub, p, 399).await;
    }
    let before: Vec<_> = (0..4).map(|p| kept(&hub, p)).collect();
    hub.shutdown().await;

    let hub = start(state.path(), |_| {}).await;
    let consumer = sdk_consumer(&hub).await;
    let expected: Vec<i64> = (0..400).collect();
    for (p, events) in before.iter().enumerate() {
        assert_eq!(&kept(&hub, p), events, "partition {p} as it was");
        assert_eq!(sdk_read(&consumer, p, 400).await, expected, "partition {p}");
    }
    let last = before[0].last().unwrap();
    let next = hub.partitions().append_to(0, message(0, 400));
    assert_eq!(next.sequence_number, 400);
    assert_eq!(
        next.offset,
        last.offset + last.message.body.len() as i64,
        "offsets continue"
    );
    assert!(next.enqueued_ms >= last.enqueued_ms);
    let mut bodies = Vec::new();
    sdk_read_while(&consumer, 0, |event| {
        bodies.push(event.event_data().body().unwrap().to_vec());
        bodies.len() < 401
    })
    .await;
    assert_eq!(bodies[400], next.message.body.to_vec());
    consumer.close().await.unwrap();
    hub.shutdown().await;
}

/// The segment files of partition `p`, oldest first.
fn segments(state: &Path, p: usize) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(state.join("data").join(p.to_string()))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| path.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_cut_back_and_the_numbering_goes_on_from_the_last_whole_event() {
    let state = tempfile::tempdir().unwrap();
    let hub = start(state.path(), |_| {}).await;
    for i in 0..10 {
        hub.partitions().append_to(1, message(1, i));
    }
    readable(&hub, 1, 9).await;
    hub.shutdown().await;
    let segment = segments(state.path(), 1).pop().unwrap();
    let whole = std::fs::metadata(&segment).unwrap().len();
    // What a crash in the middle of a write leaves: a record's header and part of its body.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap()
        .write_all(&[200, 0, 0, 0, 1, 2, 3, 4, b'{', b'"'])
        .unwrap();

    let hub = start(state.path(), |_| {}).await;
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), whole);
    assert_eq!(
        hub.partitions().get(1).unwrap().info().last_sequence_number,
        9
    );
    let event = hub.partitions().append_to(1, message(1, 10));
    assert_eq!(event.sequence_number, 10);
    readable(&hub, 1, 10).await;
    hub.shutdown().await;

    let hub = start(state.path(), |_| {}).await;
    let consumer = sdk_consumer(&hub).await;
    assert_eq!(
        sdk_read(&consumer, 1, 11).await,
        (0..11).collect::<Vec<_>>()
    );
    assert_eq!(kept(&hub, 1)[10].message.body, event.message.body);
    consumer.close().await.unwrap();
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_segments_and_applies_again_on_restart() {
    let state = tempfile::tempdir().unwrap();
    let small = |config: &mut HubConfig| {
        config.retention = Retention {
            max_events: 50,
            max_bytes: usize::MAX,
        };
        if let Some(data) = config.data_dir.as_mut() {
            data.segment_bytes = 2_000;
        }
    };
    let hub = start(state.path(), small).await;
    for i in 0..1_000 {
        hub.partitions().append_to(2, message(2, i));
        if i % 100 == 99 {
            // At most 100 events per write, and a new segment once one holds 2,000 bytes
            // (about 20 events): without deletion at least 10 segments.
            readable(&hub, 2, i as i64).await;
        }
    }
    let info = hub.partitions().get(2).unwrap().info();
    assert_eq!((info.begin_sequence_number, info.depth), (950, 50));
    let files = segments(state.path(), 2);
    let first: i64 = files[0]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        files.len() <= 5 && (900..=950).contains(&first),
        "retention deletes the segments before the one holding 950: {files:?}"
    );
    hub.shutdown().await;

    // Restarted with a smaller bound: retention applies to what is read back.
    let hub = start(state.path(), |config| {
        small(config);
        config.retention.max_events = 10;
    })
    .await;
    let info = hub.partitions().get(2).unwrap().info();
    assert_eq!(
        (info.begin_sequence_number, info.last_sequence_number),
        (990, 999)
    );
    assert_eq!(
        hub.partitions()
            .append_to(2, message(2, 1_000))
            .sequence_number,
        1_000
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_of_another_partition_count_is_refused() {
    let state = tempfile::tempdir().unwrap();
    start(state.path(), |_| {}).await.shutdown().await;
    let mut config = HubConfig::new(state.path());
    config.data_dir = Some(DataDir::new(state.path().join("data")));
    config.partitions = 2;
    let error = HubSim::start(config).await.err().expect("refused");
    assert!(
        error.to_string().contains("written with 4 partitions"),
        "{error}"
    );
}

/// A child process killed (SIGKILL) when dropped, so that a failing test leaves none behind.
struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `hub-sim` process on `state` with `--data-dir state/data` and 4 devices, its AMQP
/// address, and its MQTT/TLS port (read from the line it prints once it listens).
fn spawn_binary(state: &Path) -> (Process, SocketAddr, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hub-sim"))
        .arg("--state-dir")
        .arg(state)
        .arg("--data-dir")
        .arg(state.join("data"))
        .args(["--mqtt-port", "0", "--ws-port", "0", "--amqp-port", "0"])
        .args(["--devices", "4", "--device-prefix", "drone-"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let child = Process(child);
    let mut line = String::new();
    while !line.starts_with("hub-sim: MQTT/TLS") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "hub-sim ended");
    }
    // Its log goes on to stdout: drained until the process ends.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    // hub-sim: MQTT/TLS 127.0.0.1:P WebSockets 127.0.0.1:P AMQP 127.0.0.1:P state DIR
    let words: Vec<&str> = line.split_whitespace().collect();
    let mqtt: SocketAddr = words[2].parse().unwrap_or_else(|_| panic!("{line}"));
    let amqp: SocketAddr = words[6].parse().unwrap_or_else(|_| panic!("{line}"));
    (child, amqp, mqtt.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_killed_after_pubacks_loses_none_of_the_acknowledged_messages() {
    const PER_DEVICE: usize = 5_000;
    let state = tempfile::tempdir().unwrap();
    let (hub, _, mqtt_port) = tokio::task::spawn_blocking({
        let state = state.path().to_owned();
        move || spawn_binary(&state)
    })
    .await
    .unwrap();
    let ca = std::fs::read(state.path().join("ca.pem")).unwrap();
    let devices = std::fs::read_to_string(state.path().join("devices.txt")).unwrap();
    // Each device publishes `{device}:{i}` for i in 0.. and counts its PUBACKs (they come in
    // publish order); the hub is killed once every device has 200 and while more are in flight.
    let acked: Vec<Arc<AtomicUsize>> = (0..4).map(|_| Arc::default()).collect();
    for (line, acked) in devices.lines().zip(&acked) {
        let options = device_options(line, mqtt_port, &ca, 100);
        let id = options.client_id();
        let (client, mut events) = AsyncClient::new(options, 100);
        tokio::spawn(async move {
            for i in 0..PER_DEVICE {
                let topic = format!("devices/{id}/messages/events/");
                let body = format!("{id}:{i}");
                if client
                    .publish(topic, QoS::AtLeastOnce, false, body)
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        let acked = acked.clone();
        tokio::spawn(async move {
            while let Ok(event) = events.poll().await {
                if let rumqttc::Event::Incoming(Packet::PubAck(_)) = event {
                    acked.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    eventually(
        "200 PUBACKs for each device",
        Duration::from_secs(120),
        async || {
            acked
                .iter()
                .map(|a| a.load(Ordering::SeqCst))
                .collect::<Vec<_>>()
        },
        |acked| acked.iter().all(|&n| n >= 200),
    )
    .await;
    drop(hub); // SIGKILL
    let acked: Vec<usize> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
    assert!(
        acked.iter().any(|&n| n < PER_DEVICE),
        "the hub was killed with messages in flight: {acked:?}"
    );

    let (hub, amqp, _) = tokio::task::spawn_blocking({
        let state = state.path().to_owned();
        move || spawn_binary(&state)
    })
    .await
    .unwrap();
    let connection_string =
        std::fs::read_to_string(state.path().join("eventhub-connection-string")).unwrap();
    let consumer = sdk_consumer_at(amqp, "amqp", connection_string.trim()).await;
    // Per device, what the restarted hub serves: its messages' numbers in partition order.
    let mut served: HashMap<String, Vec<usize>> = HashMap::new();
    let ids: Vec<String> = (0..4).map(|d| format!("drone-{d}")).collect();
    for p in 0..4 {
        let mine: Vec<(&String, usize)> = ids
            .iter()
            .zip(&acked)
            .filter(|(id, _)| (stable_hash(id) % 4) as usize == p)
            .map(|(id, n)| (id, *n))
            .collect();
        if mine.iter().all(|(_, n)| *n == 0) {
            continue;
        }
        sdk_read_while(&consumer, p, |event| {
            let body = String::from_utf8(event.event_data().body().unwrap().to_vec()).unwrap();
            let (id, i) = body.split_once(':').unwrap();
            served
                .entry(id.to_owned())
                .or_default()
                .push(i.parse().unwrap());
            // Read on until each device of this partition has as many as were acknowledged.
            mine.iter()
                .any(|(id, n)| served.get(*id).map_or(0, Vec::len) < *n)
        })
        .await;
    }
    consumer.close().await.unwrap();
    drop(hub);
    for (id, n) in ids.iter().zip(&acked) {
        let got = served.get(id).map_or(&[][..], Vec::as_slice);
        let expected: Vec<usize> = (0..*n).collect();
        assert_eq!(
            &got[..*n],
            &expected[..],
            "{id}: every acknowledged message, in order"
        );
    }
}

//! A drone whose board clock is wrong, end to end: the agent binary runs under libfaketime
//! (Debian's `faketime`) believing it is 1970, or two hours behind, while a flight
//! controller sends real GPS time in `SYSTEM_TIME`. The agent connects to the local hub
//! over TLS with SAS (both checked against GPS-corrected time), and the writer, on the
//! real clock, accepts every position and stores it with the GPS time of the fix.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use cloud_writer::Secret;
use cloud_writer::{DropReason, Settings};
use cosmos::{
    ContainerClient, CosmosClient, CosmosConfig, Credential, MasterKey, QueryRequest, QueryScope,
};
use cosmos_sim::CosmosSim;
use hub_sim::{HubConfig, HubSim};
use mavlink::MavlinkVersion;
use mavlink::dialects::common::{
    GLOBAL_POSITION_INT_DATA, HEARTBEAT_DATA, MavAutopilot, MavMessage, MavModeFlag, MavState,
    MavType, SYSTEM_TIME_DATA,
};
use serde_json::Value;
use test_harness::eventually;
use test_harness::free_udp_port;
use tokio::net::UdpSocket;

/// GPS times of the positions the flight controller sent, by latitude (degE7).
type Sent = Arc<Mutex<HashMap<i32, DateTime<Utc>>>>;

/// An ArduPilot-like flight controller on system 1 streaming to every `port` at 10 Hz:
/// `HEARTBEAT`, `SYSTEM_TIME` with this host's (correct) time, and a position whose
/// latitude differs each time, all in frames the `mavlink` crate writes.
async fn flight_controller(ports: Vec<u16>, sent: Sent) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let booted = Utc::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for step in 0.. {
        tick.tick().await;
        // Whole milliseconds, the wire message's precision.
        let now = DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap();
        let boot_ms = u32::try_from((now - booted).num_milliseconds()).unwrap();
        let lat = 476_200_000 + step;
        let messages = [
            MavMessage::HEARTBEAT(HEARTBEAT_DATA {
                custom_mode: 0,
                mavtype: MavType::MAV_TYPE_QUADROTOR,
                autopilot: MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA,
                base_mode: MavModeFlag::empty(),
                system_status: MavState::MAV_STATE_ACTIVE,
                mavlink_version: 3,
            }),
            MavMessage::SYSTEM_TIME(SYSTEM_TIME_DATA {
                time_unix_usec: u64::try_from(now.timestamp_micros()).unwrap(),
                time_boot_ms: boot_ms,
            }),
            MavMessage::GLOBAL_POSITION_INT(GLOBAL_POSITION_INT_DATA {
                time_boot_ms: boot_ms,
                lat,
                lon: -1_223_490_000,
                alt: 120_000,
                relative_alt: 100_000,
                vx: 300,
                vy: 400,
                vz: 0,
                hdg: 9_000,
            }),
        ];
        // The position's GPS time, by the protocol's definition: SYSTEM_TIME's UNIX time
        // at the position's boot time (the same instant here).
        sent.lock().unwrap().insert(lat, now);
        for message in &messages {
            let header = mavlink::MavHeader {
                system_id: 1,
                component_id: 1,
                sequence: step as u8,
            };
            let mut frame = Vec::new();
            mavlink::write_versioned_msg(&mut frame, MavlinkVersion::V2, header, message).unwrap();
            for port in &ports {
                socket.send_to(&frame, ("127.0.0.1", *port)).await.unwrap();
            }
        }
    }
}

/// The agent binary believing the time is `faketime` (libfaketime's `FAKETIME` form),
/// reading MAVLink on `mavlink_port`, publishing to `hub` as `device`.
fn agent(
    hub: &HubSim,
    dir: &Path,
    device: &str,
    connection_string: String,
    faketime: &str,
    mavlink_port: u16,
) -> Agent {
    let ca = dir.join("hub-ca.pem");
    std::fs::write(&ca, hub.ca_pem()).unwrap();
    let status = dir.join(format!("{device}.json"));
    // libfaketime preloaded into the agent itself (not the `faketime` wrapper, whose
    // child would outlive a killed wrapper).
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", faketime)
        // Timers run on the real monotonic clock; only the calendar is wrong.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env_remove("MQTT_URL")
        .env_remove("EDGE_AGENT_CONFIG")
        .env("IOTHUB_DEVICE_CONNECTION_STRING", connection_string)
        .env("IOTHUB_CA_FILE", &ca)
        .env("IOTHUB_PORT", hub.mqtt_addr().port().to_string())
        .env("POSITION_SOURCE", "mavlink")
        .env("MAVLINK_ADDRESS", format!("udpin:127.0.0.1:{mavlink_port}"))
        .env("REPORT_INTERVAL", "300ms")
        .env("RECONNECT_BASE", "200ms")
        .env("RECONNECT_CAP", "1s")
        .env("BUFFER_DIR", dir.join(device))
        .env("STATUS_FILE", &status)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Agent {
        _child: child,
        status,
    }
}

/// Debian's libfaketime (package `libfaketime`, which `faketime` brings).
fn libfaketime() -> PathBuf {
    let multiarch = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
    let path = Path::new(&multiarch).join("faketime/libfaketime.so.1");
    assert!(
        path.is_file(),
        "{} is missing: install Debian's faketime (scripts/test-all does)",
        path.display()
    );
    path
}

struct Agent {
    _child: tokio::process::Child,
    status: PathBuf,
}

impl Agent {
    fn status(&self) -> Option<Value> {
        serde_json::from_slice(&std::fs::read(&self.status).ok()?).ok()
    }
}

fn container(endpoint: &str) -> ContainerClient {
    let key = MasterKey::from_base64(cosmos_wire::auth::EMULATOR_KEY).unwrap();
    CosmosClient::new(CosmosConfig::new(
        endpoint.parse().unwrap(),
        Credential::MasterKey(key),
    ))
    .unwrap()
    .container("telemetry", "positions")
}

async fn latest(container: &ContainerClient) -> HashMap<String, Value> {
    let query = QueryRequest {
        query: "SELECT * FROM c WHERE c.kind = 'latest'".into(),
        parameters: vec![],
    };
    match container.query(&query, QueryScope::AllRanges).await {
        Ok(response) => response
            .documents
            .into_iter()
            .map(|d| (d["deviceId"].as_str().unwrap().to_owned(), d))
            .collect(),
        // The writer creates the container when it starts.
        Err(_) => HashMap::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_board_clocks_publish_positions_stamped_with_gps_time() {
    let dir = tempfile::tempdir().unwrap();
    let hub = HubSim::start(HubConfig::new(dir.path().join("hub")))
        .await
        .unwrap();
    let cosmos = CosmosSim::builder().partitions(2).start().await.unwrap();
    let writer = cloud_writer::Writer::start(
        Settings {
            cosmos_endpoint: Some(cosmos.endpoint().parse().unwrap()),
            cosmos_key: Some(Secret::new(cosmos_wire::auth::EMULATOR_KEY)),
            cosmos_database: Some("telemetry".into()),
            cosmos_container: Some("positions".into()),
            cosmos_create_if_missing: Some(true),
            writer_source: Some(Secret::new(hub.eventhub_connection_string())),
            eventhubs_start_position: Some("earliest".into()),
            metrics_addr: Some("127.0.0.1:0".into()),
            probe_addr: Some("off".into()),
            ..Settings::default()
        }
        .resolve()
        .unwrap(),
    )
    .await
    .unwrap();

    let drones = [
        ("drone-1970", "@1970-01-01 00:00:00"),
        ("drone-2h-behind", "-2h"),
    ];
    let ports: Vec<u16> = drones.iter().map(|_| free_udp_port()).collect();
    let mut agents = Vec::new();
    for ((device, faketime), port) in drones.iter().zip(&ports) {
        let connection_string = hub.add_device(device).unwrap();
        agents.push(agent(
            &hub,
            dir.path(),
            device,
            connection_string,
            faketime,
            *port,
        ));
    }
    let sent = Sent::default();
    let controller = tokio::spawn(flight_controller(ports, sent.clone()));

    // Every drone's document carries the GPS time of the position it holds.
    let container = container(&cosmos.endpoint());
    let (docs, _) = eventually(
        "every drone's document, with three positions acknowledged",
        Duration::from_secs(90),
        async || {
            let statuses: Vec<_> = agents.iter().map(Agent::status).collect();
            (latest(&container).await, statuses)
        },
        |(docs, statuses)| {
            docs.len() == drones.len()
                && statuses
                    .iter()
                    .all(|s| s.as_ref().is_some_and(|s| s["acked"].as_u64() >= Some(3)))
        },
    )
    .await;
    let sent = sent.lock().unwrap().clone();
    for (device, _) in drones {
        let doc = &docs[device];
        let lat_e7 = (doc["location"]["coordinates"][1].as_f64().unwrap() * 1e7).round() as i32;
        let gps = sent
            .get(&lat_e7)
            .unwrap_or_else(|| panic!("{device}: a position the controller never sent: {doc}"));
        assert_eq!(
            doc["deviceTimeMs"].as_i64(),
            Some(gps.timestamp_millis()),
            "{device}: stored with the fix's GPS time: {doc}"
        );
    }
    let counts = writer.counts();
    assert_eq!(counts.dropped(DropReason::Stale), 0, "{counts:?}");
    assert_eq!(counts.dropped(DropReason::FromFuture), 0, "{counts:?}");

    // The agents say which clock stamped their positions and how far off the board is.
    let offsets: Vec<i64> = agents
        .iter()
        .map(|a| {
            let status = a.status().unwrap();
            assert_eq!(status["clock"]["last"], "gps", "{status}");
            status["clock"]["board_offset_ms"].as_i64().unwrap()
        })
        .collect();
    let since_1970 = Utc::now().timestamp_millis();
    assert!(
        (offsets[0] - since_1970).abs() < 600_000,
        "1970 board: {offsets:?}"
    );
    assert!(
        (offsets[1] - 7_200_000).abs() < 60_000,
        "two hours behind: {offsets:?}"
    );

    controller.abort();
    writer.shutdown();
    writer.wait().await.unwrap();
    hub.shutdown().await;
}

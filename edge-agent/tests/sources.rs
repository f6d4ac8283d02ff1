//! The real position sources end to end: MAVLink `GLOBAL_POSITION_INT` over UDP, and a
//! gpsd socket serving recorded reports; the published message carries the position and
//! the GNSS health the source gave (none from a MAVLink vehicle without `GPS_RAW_INT`).

mod common;

use std::time::Duration;

use common::{Running, Subscriber, sim_config};
use edge_agent::SourceConfig;
use edge_agent::{MavlinkAddress, MavlinkConfig};
use mavlink::MavlinkVersion;
use mavlink::dialects::common::{
    GLOBAL_POSITION_INT_DATA, HEARTBEAT_DATA, MavAutopilot, MavMessage, MavModeFlag, MavState,
    MavType,
};
use telemetry::{FixType, Gnss};
use test_harness::{Mosquitto, free_udp_port};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

#[tokio::test]
async fn mavlink_global_position_int_over_udp_is_published() {
    let broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-mavlink").await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let mut config = sim_config("drone-mav", broker.port(), dir.path());
    config.source = SourceConfig::Mavlink(MavlinkConfig {
        address: MavlinkAddress::UdpIn(format!("127.0.0.1:{port}")),
        system_id: None,
        signing_key: None,
    });
    let agent = Running::start(config);

    // A flight controller announcing itself and streaming its position at 20 Hz, in
    // frames the `mavlink` crate writes.
    let autopilot = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    autopilot.connect(("127.0.0.1", port)).await.unwrap();
    let heartbeat = MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        custom_mode: 0,
        mavtype: MavType::MAV_TYPE_QUADROTOR,
        autopilot: MavAutopilot::MAV_AUTOPILOT_ARDUPILOTMEGA,
        base_mode: MavModeFlag::empty(),
        system_status: MavState::MAV_STATE_ACTIVE,
        mavlink_version: 3,
    });
    let position = MavMessage::GLOBAL_POSITION_INT(GLOBAL_POSITION_INT_DATA {
        time_boot_ms: 123_456,
        lat: 476_205_123,
        lon: -1_223_493_456,
        alt: 121_500,
        relative_alt: 95_000,
        vx: 300,
        vy: -400,
        vz: 0,
        hdg: 27_050,
    });
    let stream = async {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tick.tick().await;
            for message in [&heartbeat, &position] {
                let mut frame = Vec::new();
                let header = mavlink::MavHeader {
                    system_id: 1,
                    component_id: 1,
                    sequence: 0,
                };
                mavlink::write_versioned_msg(&mut frame, MavlinkVersion::V2, header, message)
                    .unwrap();
                autopilot.send(&frame).await.unwrap();
            }
        }
    };
    let received = tokio::select! {
        received = subscriber.next() => received,
        () = stream => unreachable!(),
    };
    let p = received.position;
    assert_eq!(p.device_id, "drone-mav");
    assert!((p.lat - 47.620_512_3).abs() < 1e-9, "{p:?}");
    assert!((p.lon + 122.349_345_6).abs() < 1e-9, "{p:?}");
    assert_eq!(p.alt_m, Some(121.5));
    assert_eq!(p.heading_deg, Some(270.5));
    assert_eq!(p.speed_mps, Some(5.0));
    assert!(p.gnss.is_empty(), "no GPS_RAW_INT, no health: {p:?}");
    agent.stop().await;
}

/// Lines recorded from gpsd 3.25 with a u-blox receiver.
const VERSION: &str =
    r#"{"class":"VERSION","release":"3.25","rev":"3.25","proto_major":3,"proto_minor":15}"#;
const DEVICES: &str = r#"{"class":"DEVICES","devices":[{"class":"DEVICE","path":"/dev/ttyACM0","driver":"u-blox","activated":"2026-11-22T09:14:58.112Z","flags":1,"native":1,"bps":9600,"parity":"N","stopbits":1,"cycle":1.00,"mincycle":0.25}]}"#;
const WATCH: &str = r#"{"class":"WATCH","enable":true,"json":true,"nmea":false,"raw":0,"scaled":false,"timing":false,"split24":false,"pps":false}"#;
const SKY: &str = r#"{"class":"SKY","device":"/dev/ttyACM0","time":"2026-11-22T09:15:01.000Z","xdop":0.64,"ydop":0.88,"hdop":1.09,"nSat":12,"uSat":8,"satellites":[{"PRN":2,"el":38.0,"az":274.0,"ss":30.0,"used":true,"gnssid":0,"svid":2}]}"#;
const TPV_FIX_A: &str = r#"{"class":"TPV","device":"/dev/ttyACM0","mode":3,"time":"2026-11-22T09:15:01.000Z","leapseconds":18,"ept":0.005,"lat":47.620512300,"lon":-122.349345600,"altHAE":98.812,"altMSL":121.500,"alt":121.500,"epx":4.052,"epy":5.523,"epv":11.270,"track":270.5000,"magtrack":285.8321,"magvar":15.3,"speed":5.012,"climb":0.000,"eps":11.05,"epc":22.54,"geoidSep":-22.688,"eph":10.490,"sep":15.320}"#;
const TPV_NO_FIX: &str = r#"{"class":"TPV","device":"/dev/ttyACM0","mode":1,"time":"2026-11-22T09:15:06.000Z","leapseconds":18}"#;
const TPV_FIX_B: &str = r#"{"class":"TPV","device":"/dev/ttyACM0","mode":3,"time":"2026-11-22T09:15:11.000Z","leapseconds":18,"ept":0.005,"lat":47.621000000,"lon":-122.350000000,"altHAE":100.112,"altMSL":122.800,"epx":4.0,"epy":5.5,"epv":11.2,"track":91.2500,"speed":7.250,"climb":0.100}"#;

/// A gpsd that answers `?WATCH` with its greeting and then serves the lines it is given.
async fn fake_gpsd() -> (String, mpsc::UnboundedSender<&'static str>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (tx, mut rx) = mpsc::unbounded_channel::<&'static str>();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let watch = lines.next_line().await.unwrap().unwrap();
        assert!(watch.starts_with("?WATCH="), "{watch}");
        assert!(watch.contains("\"json\":true"), "{watch}");
        for line in [VERSION, DEVICES, WATCH, SKY] {
            write
                .write_all(format!("{line}\r\n").as_bytes())
                .await
                .unwrap();
        }
        while let Some(line) = rx.recv().await {
            write
                .write_all(format!("{line}\r\n").as_bytes())
                .await
                .unwrap();
        }
    });
    (address, tx)
}

#[tokio::test]
async fn gpsd_tpv_reports_are_published_and_no_fix_means_no_message() {
    let broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-gpsd").await;
    let (address, gpsd) = fake_gpsd().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = sim_config("drone-gps", broker.port(), dir.path());
    config.source = SourceConfig::Gpsd {
        address: address.parse().unwrap(),
    };
    // Fixes never go stale here: only gpsd's own "no fix" can stop the messages.
    config.max_fix_age = Duration::from_secs(3600);
    let agent = Running::start(config);

    // A cycle as gpsd sends it: the TPV, then the SKY of the same fix.
    gpsd.send(TPV_FIX_A).unwrap();
    gpsd.send(SKY).unwrap();
    let p = subscriber.next().await.position;
    assert_eq!(p.device_id, "drone-gps");
    assert_eq!(p.gnss.fix, Some(FixType::Fix3d), "mode 3, no status");
    assert_eq!(p.gnss.h_acc_m, Some(10.49), "eph");
    let with_sky = subscriber
        .until(|r| r.last().is_some_and(|r| r.position.gnss.sats.is_some()))
        .await
        .pop()
        .unwrap()
        .position;
    assert_eq!((with_sky.lat, with_sky.lon), (47.6205123, -122.3493456));
    assert_eq!(with_sky.gnss.sats, Some(8), "uSat");
    assert_eq!(with_sky.gnss.sats_visible, Some(12), "nSat");
    assert_eq!((p.lat, p.lon), (47.6205123, -122.3493456));
    assert_eq!(p.alt_m, Some(121.5));
    assert_eq!(p.heading_deg, Some(270.5));
    assert_eq!(p.speed_mps, Some(5.012));
    assert_eq!(p.ts.to_rfc3339(), "2026-11-22T09:15:01+00:00");

    // Mode 1: no fix. Intervals pass without messages, and are counted.
    gpsd.send(TPV_NO_FIX).unwrap();
    let start = agent.handle.status().no_fix;
    let quiet = agent
        .wait_for("no-fix intervals", |s| s.no_fix >= start + 2)
        .await;
    let later = agent
        .wait_for("more no-fix intervals", |s| s.no_fix >= quiet.no_fix + 3)
        .await;
    assert_eq!(later.generated, quiet.generated, "no fix means no message");

    gpsd.send(TPV_FIX_B).unwrap();
    let fix_b = loop {
        let p = subscriber.next().await.position;
        if p.lat == 47.621 {
            break p;
        }
    };
    assert_eq!(fix_b.lon, -122.35);
    assert_eq!(fix_b.alt_m, Some(122.8));
    assert_eq!(fix_b.heading_deg, Some(91.25));
    // No eph (epx and epy are not combined into one), and the SKY came before the no-fix
    // report: no accuracy, no satellites.
    assert_eq!(
        fix_b.gnss,
        Gnss {
            fix: Some(FixType::Fix3d),
            ..Gnss::default()
        }
    );
    agent.stop().await;
}

#[tokio::test]
async fn a_failing_source_is_restarted_and_counted() {
    // Nothing listens here: every connection attempt fails.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = closed.local_addr().unwrap().to_string();
    drop(closed);
    // A live broker, so that the last error is the source's, not the connection's.
    let broker = Mosquitto::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = sim_config("drone-gps", broker.port(), dir.path());
    config.source = SourceConfig::Gpsd {
        address: address.parse().unwrap(),
    };
    let agent = Running::start(config);
    let status = agent
        .wait_for("source restarts", |s| s.source_restarts >= 2)
        .await;
    assert!(
        status.last_error.as_deref().unwrap_or("").contains("gpsd"),
        "{status:?}"
    );
    assert_eq!(status.generated, 0);
    agent.stop().await;
}

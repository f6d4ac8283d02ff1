//! The MAVLink source against a real MAVLink peer: the `edge-agent` binary reads a
//! flight controller made of pymavlink (tests/python/flight_controller.py, in the
//! environment scripts/test-all makes) over UDP, a router's server endpoint, TCP and a
//! serial line (a pty pair), and publishes to Mosquitto. Every published position must be
//! one the vehicle sent, scaled as the protocol says, at the GPS time the vehicle gave;
//! the expectations come from the peer's own account of what it sent. With a signing key
//! (tests/mavlink/signing.rs) only frames signed with it are read, and the agent signs.

mod common;

#[path = "mavlink/agent.rs"]
mod agent;
#[path = "mavlink/expect.rs"]
mod expect;
#[path = "mavlink/peer.rs"]
mod peer;
#[path = "mavlink/rig.rs"]
mod rig;
#[path = "mavlink/signing.rs"]
mod signing;

use std::collections::HashSet;

use agent::{mavlink_count, vehicle};
use expect::{describe, expected_positions};
use peer::{agent_heartbeats, events};
use rig::{Link, Rig, bounded, distinct_places, sent_positions};
use serde_json::Value;
use telemetry::wire::{FixType, Gnss};

/// GPS time as the vehicles announce it: an hour and a quarter second behind the board
/// clock, so that a position stamped by the board clock is told apart.
const GPS_TIME: &str = "offset:-3600.25";

/// `MAV_TYPE_ONBOARD_CONTROLLER`, `MAV_AUTOPILOT_INVALID`, `MAV_COMP_ID_ONBOARD_COMPUTER`.
const ONBOARD_CONTROLLER: u64 = 18;
const AUTOPILOT_INVALID: u64 = 8;
const ONBOARD_COMPUTER: u64 = 191;

/// Waits for the agent's own HEARTBEAT as the flight controller decoded it, and checks
/// what it says: an onboard controller, not an autopilot, from the onboard computer's
/// component, for `system_id`, in MAVLink `version`.
async fn assert_agent_heartbeat(rig: &mut Rig, system_id: u64, version: u64) {
    let lines = rig
        .wait_peer(
            &format!("the agent's HEARTBEAT for system {system_id} in MAVLink {version}"),
            |lines| {
                agent_heartbeats(lines)
                    .iter()
                    .any(|h| h.system_id == system_id && h.version == version)
            },
        )
        .await;
    for heartbeat in agent_heartbeats(&lines) {
        assert_eq!(
            (
                heartbeat.mav_type,
                heartbeat.autopilot,
                heartbeat.component_id
            ),
            (ONBOARD_CONTROLLER, AUTOPILOT_INVALID, ONBOARD_COMPUTER),
            "{heartbeat:?}"
        );
    }
}

/// One vehicle streaming `GLOBAL_POSITION_INT` (30 points) with GPS time: every
/// published position is one it sent, at its GPS time, and the status names the vehicle,
/// its MAVLink version and the GPS clock.
async fn one_vehicle_streams(link: Link, peer_args: &[&str], version: u64, signed: bool) {
    let mut args = vec![
        "--vehicle",
        "1,battery=81",
        "--points",
        "30",
        "--system-time",
        GPS_TIME,
    ];
    args.extend_from_slice(peer_args);
    let mut rig = Rig::start(link, &args, &[]).await;
    // The whole route delivered, and enough publications to cover several points.
    rig.collect("30 positions sent and 5 published", |published, lines| {
        sent_positions(lines, 1, "GLOBAL_POSITION_INT") >= 30
            && published.len() >= 5
            && distinct_places(published) >= 3
    })
    .await;
    let expected = rig.assert_published_were_sent(1, true).await;
    let places: HashSet<_> = expected
        .iter()
        .map(|e| (e.lat.to_bits(), e.lon.to_bits()))
        .collect();
    assert_eq!(places.len(), 30, "the route has 30 distinct points");
    let lines = rig.peer.lines();
    for line in events(&lines, "sent", None) {
        assert_eq!(line["v"], version, "{line}");
        assert_eq!(line["signed"], signed, "{line}");
    }
    assert!(
        rig.published
            .iter()
            .all(|p| p.battery_pct.is_none_or(|b| b == 81)),
        "battery is the vehicle's 81%"
    );
    let version_name = format!("v{version}");
    let status = rig
        .agent
        .wait_status(
            "the vehicle, its version and the GPS clock in the status",
            |s| {
                vehicle(s) == Some((1, 1))
                    && s["mavlink"]["version"] == version_name.as_str()
                    && s["clock"]["last"] == "gps"
            },
        )
        .await;
    assert_eq!(
        mavlink_count(&status, "ignored_other_systems"),
        0,
        "{status}"
    );
    assert!(
        status["mavlink"]["refused"].is_null(),
        "frames are not checked without a key: {status}"
    );
    // Once the vehicle is locked the agent speaks its version.
    assert_agent_heartbeat(&mut rig, 1, version).await;
    // The flight controller ends cleanly when its input closes.
    let Rig { peer, .. } = rig;
    peer.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mavlink1_frames_are_read() {
    bounded(one_vehicle_streams(
        Link::AgentUdpin,
        &["--mavlink", "1"],
        1,
        false,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mavlink2_frames_are_read_over_tcp() {
    bounded(one_vehicle_streams(
        Link::AgentTcpout,
        &["--mavlink", "2"],
        2,
        false,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_mavlink2_frames_are_read_without_the_key() {
    bounded(one_vehicle_streams(
        Link::AgentUdpin,
        &["--mavlink", "2", "--signed", "vehicle-1 signing passphrase"],
        2,
        true,
    ))
    .await;
}

/// Two vehicles on one link, as through a shared radio: the first autopilot heard is
/// locked; the other's positions and battery never go out, and are counted. Nor do those
/// of another component of the locked system (not an autopilot: a second GPS, say).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_autopilot_is_locked_and_other_systems_ignored() {
    bounded(async {
        let args = [
            "--vehicle",
            "1,battery=81",
            "--vehicle",
            "2,battery=42,hold",
            "--vehicle",
            "1,comp=154,autopilot=8,battery=13",
            "--system-time",
            GPS_TIME,
        ];
        let mut rig = Rig::start(Link::AgentUdpin, &args, &[]).await;
        rig.agent
            .wait_status("system 1 locked", |s| vehicle(s) == Some((1, 1)))
            .await;
        // Now system 2 joins: its HEARTBEAT (an autopilot too), positions and battery
        // interleave with system 1's.
        rig.peer.command("start 2");
        rig.collect(
            "system 2 streaming and 5 positions published",
            |published, lines| {
                sent_positions(lines, 2, "GLOBAL_POSITION_INT") >= 10 && published.len() >= 5
            },
        )
        .await;
        let before = rig.published.len();
        rig.collect("5 more positions published", |published, _| {
            published.len() >= before + 5
        })
        .await;
        rig.assert_published_were_sent(1, true).await;
        let lines = rig.peer.lines();
        let theirs = expected_positions(&lines);
        for p in &rig.published {
            assert!(
                !theirs
                    .iter()
                    .any(|e| e.system_id == 2 && e.matches(p, false)),
                "system 2's position published: {}",
                describe(p)
            );
            assert!(
                p.battery_pct.is_none_or(|b| b == 81),
                "not system 1's battery: {}",
                describe(p)
            );
        }
        assert_eq!(expect::batteries(&lines, 2), [42]);
        assert!(rig.published.iter().any(|p| p.battery_pct == Some(81)));
        let status = rig
            .agent
            .wait_status("system 2's messages ignored and counted", |s| {
                mavlink_count(s, "ignored_other_systems") > 0
            })
            .await;
        assert_eq!(vehicle(&status), Some((1, 1)), "still system 1: {status}");
        assert_agent_heartbeat(&mut rig, 1, 2).await;
    })
    .await;
}

/// `MAVLINK_SYSTEM_ID=2` chooses the second vehicle on the link, whoever is heard first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mavlink_system_id_chooses_the_vehicle() {
    bounded(async {
        let args = [
            "--vehicle",
            "1,battery=81",
            "--vehicle",
            "2,battery=42",
            "--system-time",
            GPS_TIME,
        ];
        let env = [("MAVLINK_SYSTEM_ID", "2")];
        let mut rig = Rig::start(Link::AgentUdpin, &args, &env).await;
        rig.collect_positions(10, 4).await;
        // Times are not compared: with the system chosen in advance the agent need not
        // wait for a HEARTBEAT, so a position may come before the SYSTEM_TIME that
        // follows the HEARTBEAT (the first test of this file checks the time).
        rig.assert_published_were_sent(2, false).await;
        for p in &rig.published {
            assert!(
                p.battery_pct.is_none_or(|b| b == 42),
                "not system 2's battery: {}",
                describe(p)
            );
        }
        let status = rig
            .agent
            .wait_status("system 2 locked, system 1 ignored", |s| {
                vehicle(s).map(|v| v.0) == Some(2) && mavlink_count(s, "ignored_other_systems") > 0
            })
            .await;
        assert_eq!(vehicle(&status), Some((2, 1)), "{status}");
        assert_agent_heartbeat(&mut rig, 2, 2).await;
    })
    .await;
}

/// A mavlink-router endpoint in server mode sends only to peers that have spoken: the
/// agent (`udpout:`) speaks first with its HEARTBEAT at 1 Hz, and then hears the vehicle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_server_endpoint_hears_the_agent_first() {
    bounded(async {
        let args = ["--vehicle", "1,battery=81", "--system-time", GPS_TIME];
        let mut rig = Rig::start(Link::RouterServer, &args, &[]).await;
        // Counted on the flight controller's own clock: the heartbeats that arrived in
        // the 3 s after the first.
        let lines = rig
            .wait_peer("3 s of the agent's heartbeats", |lines| {
                let Some(first) = agent_heartbeats(lines).first().map(|h| h.t) else {
                    return false;
                };
                lines
                    .iter()
                    .any(|l| l["t"].as_f64().is_some_and(|t| t > first + 3.2))
            })
            .await;
        let heartbeats = agent_heartbeats(&lines);
        let first = heartbeats[0].t;
        let in_window = heartbeats.iter().filter(|h| h.t <= first + 3.0).count();
        assert!(
            (2..=6).contains(&in_window),
            "{in_window} heartbeats in 3 s, expected about 3: {heartbeats:?}"
        );
        for heartbeat in &heartbeats {
            assert_eq!(
                (
                    heartbeat.mav_type,
                    heartbeat.autopilot,
                    heartbeat.component_id,
                    heartbeat.system_id
                ),
                (ONBOARD_CONTROLLER, AUTOPILOT_INVALID, ONBOARD_COMPUTER, 1),
                "{heartbeat:?}"
            );
        }
        // The endpoint sends to the agent now.
        rig.collect_positions(5, 3).await;
        rig.assert_published_were_sent(1, true).await;
        let status = rig
            .agent
            .wait_status("system 1 locked and heartbeats counted", |s| {
                vehicle(s) == Some((1, 1)) && mavlink_count(s, "heartbeats_sent") >= 2
            })
            .await;
        assert_eq!(status["mavlink"]["version"], "v2", "{status}");
    })
    .await;
}

/// A serial line (TELEM2 at 921600 baud) through a pseudo-terminal pair, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serial_link_carries_positions_and_heartbeats() {
    bounded(async {
        let args = ["--vehicle", "1,battery=81", "--system-time", GPS_TIME];
        let mut rig = Rig::start(Link::Serial, &args, &[]).await;
        rig.collect_positions(5, 3).await;
        rig.assert_published_were_sent(1, true).await;
        assert_agent_heartbeat(&mut rig, 1, 2).await;
    })
    .await;
}

/// A vehicle that sends `GPS_RAW_INT` and no `GLOBAL_POSITION_INT`: positions come
/// from it (fix type 2 or more only, unknown speed and course left out), stamped with its
/// UNIX `time_usec`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gps_raw_int_gives_the_position_without_global_position_int() {
    bounded(async {
        let args = [
            "--vehicle",
            "1,battery=81,position=gps_raw",
            "--points",
            "10",
            "--system-time",
            GPS_TIME,
        ];
        let mut rig = Rig::start(Link::AgentUdpin, &args, &[]).await;
        // 10 points a second, a point without a fix every fifth: publications every
        // 200 ms cover several of the others.
        rig.collect_positions(8, 4).await;
        let expected = rig.assert_published_were_sent(1, true).await;
        assert!(expected.iter().all(|e| e.msg == "GPS_RAW_INT"));
        let lines = rig.peer.lines();
        let no_fix: Vec<&Value> = events(&lines, "sent", Some("GPS_RAW_INT"))
            .filter(|l| l["fields"]["fix_type"].as_i64() < Some(2))
            .collect();
        assert!(!no_fix.is_empty(), "the route has points without a fix");
        for p in &rig.published {
            let lat = (p.lat * 1e7).round() as i64;
            assert!(
                !no_fix.iter().any(|l| l["fields"]["lat"] == lat),
                "a position without a fix was published: {}",
                describe(p)
            );
        }
    })
    .await;
}

/// A vehicle streaming `GLOBAL_POSITION_INT` with a `GPS_RAW_INT` after each: every
/// published position carries the health of the `GPS_RAW_INT` sent before it, read by
/// `common.xml` (fix type, visible satellites, `h_acc`; unknown values and HDOP left out),
/// and every fix type of the wire that the route's `GPS_RAW_INT`s name arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gps_raw_int_health_rides_on_global_position_int() {
    bounded(async {
        let args = [
            "--vehicle",
            "1,battery=81,gps_health",
            "--points",
            "30",
            "--system-time",
            GPS_TIME,
        ];
        let mut rig = Rig::start(Link::AgentTcpout, &args, &[]).await;
        let wanted = [
            FixType::None,
            FixType::Fix2d,
            FixType::Fix3d,
            FixType::Dgps,
            FixType::RtkFloat,
            FixType::RtkFixed,
        ];
        // Each kind of health the route has: every fix type, an accuracy and an unknown
        // one (h_acc 0), visible satellites and unknown ones (255), each on a fix.
        let kinds: [fn(&Gnss) -> bool; 4] = [
            |g| g.h_acc_m.is_some(),
            |g| g.fix.is_some() && g.h_acc_m.is_none(),
            |g| g.sats_visible.is_some(),
            |g| g.fix.is_some() && g.sats_visible.is_none(),
        ];
        rig.collect(
            "every fix type and every kind of health published",
            |published, _| {
                let has = |kind: &dyn Fn(&Gnss) -> bool| published.iter().any(|p| kind(&p.gnss));
                wanted.iter().all(|fix| has(&|g| g.fix == Some(*fix)))
                    && kinds.iter().all(|kind| has(kind))
            },
        )
        .await;
        let expected = rig.assert_published_were_sent(1, true).await;
        assert!(expected.iter().all(|e| e.msg == "GLOBAL_POSITION_INT"));
        assert!(
            rig.published.iter().all(|p| p.gnss.sats.is_none()),
            "GPS_RAW_INT counts visible satellites: none is published as used"
        );
    })
    .await;
}

/// Stray bytes, a frame with a broken checksum (a position that must never go out) and
/// messages of ArduPilot's dialect between good frames: counted, and the good positions
/// still published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_is_counted_and_good_frames_still_read() {
    bounded(async {
        let args = [
            "--vehicle",
            "1,battery=81",
            "--system-time",
            GPS_TIME,
            "--garbage-every",
            "2",
            "--unknown-messages",
        ];
        let mut rig = Rig::start(Link::AgentUdpin, &args, &[]).await;
        rig.collect(
            "5 positions published after broken frames were sent",
            |published, lines| {
                events(lines, "garbage", None).any(|l| l["kind"] == "bad_crc")
                    && published.len() >= 5
                    && distinct_places(published) >= 3
            },
        )
        .await;
        rig.assert_published_were_sent(1, true).await;
        let lines = rig.peer.lines();
        let broken: Vec<&Value> = events(&lines, "garbage", None)
            .filter(|l| l["kind"] == "bad_crc")
            .collect();
        for p in &rig.published {
            let lat = (p.lat * 1e7).round() as i64;
            assert!(
                !broken.iter().any(|l| l["fields"]["lat"] == lat),
                "the position of a frame with a broken checksum was published: {}",
                describe(p)
            );
        }
        let status = rig
            .agent
            .wait_status("unreadable frames and unknown messages counted", |s| {
                mavlink_count(s, "unreadable") > 0 && mavlink_count(s, "unknown_messages") > 0
            })
            .await;
        assert_eq!(vehicle(&status), Some((1, 1)), "{status}");
    })
    .await;
}

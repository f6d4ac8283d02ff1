//! MAVLink 2 signing (`MAVLINK_SIGNING_KEY_FILE`) against pymavlink signing with the
//! same key: the flight controller's signed positions are published, and nothing of an
//! intruder on the link (unsigned, signed with another key, or a recording two minutes
//! old); pymavlink, refusing unsigned frames, verifies the agent's own heartbeats; a
//! replayed signed frame is refused. Refusals are counted by reason in the status.

use std::io::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::GPS_TIME;
use crate::agent::vehicle;
use crate::expect::{describe, expected_positions};
use crate::peer::events;
use crate::rig::{Link, Rig, bounded, distinct_places, sent_positions};

/// The flight controller's and the agent's passphrase.
const PASSPHRASE: &str = "drone-0042 signing passphrase";

/// A key file holding sha256(passphrase) as 64 hexadecimal digits: the key MAVProxy,
/// Mission Planner and pymavlink make of a passphrase.
fn key_file(passphrase: &str) -> tempfile::NamedTempFile {
    let digest = Sha256::digest(passphrase.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "{hex}").unwrap();
    file
}

/// A refusal counter of the status (0 when absent).
fn refused(status: &Value, reason: &str) -> u64 {
    status["mavlink"]["refused"][reason].as_u64().unwrap_or(0)
}

/// The flight controller's lines, its `sent` lines only those of system `system_id`
/// signed with the key (`mine`) or all the others (`!mine`).
fn sent_by(lines: &[Value], system_id: u64, mine: bool) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| {
            l["ev"] != "sent" || ((l["sys"] == system_id && l["key"] == PASSPHRASE) == mine)
        })
        .cloned()
        .collect()
}

/// Waits until every published position is one the key holder (system 1) sent, at its
/// GPS time; then checks that none is an intruder's.
async fn assert_only_the_key_holder_published(rig: &mut Rig) {
    let published = rig.published.clone();
    let lines = rig
        .wait_peer("every published position sent by the key holder", |lines| {
            let mine = expected_positions(&sent_by(lines, 1, true));
            published
                .iter()
                .all(|p| mine.iter().any(|e| e.matches(p, true)))
        })
        .await;
    let theirs = expected_positions(&sent_by(&lines, 1, false));
    assert!(!theirs.is_empty(), "the intruders sent positions");
    for p in &rig.published {
        assert!(
            !theirs.iter().any(|e| e.same_place(p)),
            "an intruder's position was published: {}",
            describe(p)
        );
        assert!(
            p.battery_pct.is_none_or(|b| b == 81),
            "not the vehicle's battery: {}",
            describe(p)
        );
    }
}

/// On one link: system 2 unsigned, system 3 signed with another key, system 4 with the
/// key but two minutes behind (a recording), and an impostor with the vehicle's own ids
/// (system 1, component 1), unsigned, flying elsewhere. None of them is chosen, their
/// positions never go out, and each is counted by its reason; then the vehicle, signing
/// with the key, is chosen and published. pymavlink, refusing unsigned frames, accepts
/// every heartbeat of the agent as signed with the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_frames_signed_with_the_key_are_published() {
    bounded(async {
        let key = key_file(PASSPHRASE);
        let key_path = key.path().to_str().unwrap().to_owned();
        let args = [
            "--signed",
            PASSPHRASE,
            "--verify-signed",
            "--system-time",
            GPS_TIME,
            "--vehicle",
            "2,key=none,battery=42",
            "--vehicle",
            "3,key=another passphrase,battery=43",
            "--vehicle",
            "4,stale=120,battery=44",
            "--vehicle",
            "1,key=none,route=1,battery=13",
            "--vehicle",
            "1,hold,battery=81",
        ];
        let env = [("MAVLINK_SIGNING_KEY_FILE", key_path.as_str())];
        let mut rig = Rig::start(Link::AgentUdpin, &args, &env).await;
        let status = rig
            .agent
            .wait_status("each intruder refused for its reason", |s| {
                refused(s, "unsigned") > 0
                    && refused(s, "bad_signature") > 0
                    && refused(s, "old_timestamp") > 0
            })
            .await;
        assert_eq!(vehicle(&status), None, "an intruder was chosen: {status}");
        assert_eq!(
            status["generated"], 0,
            "a position before the vehicle spoke: {status}"
        );

        rig.peer.command("start 1");
        rig.collect(
            "the vehicle's positions published while the intruders send theirs",
            |published, lines| {
                sent_positions(lines, 4, "GLOBAL_POSITION_INT") >= 10
                    && published.len() >= 8
                    && distinct_places(published) >= 4
            },
        )
        .await;
        assert_only_the_key_holder_published(&mut rig).await;
        let status = rig
            .agent
            .wait_status("the vehicle chosen", |s| vehicle(s) == Some((1, 1)))
            .await;
        assert_eq!(status["clock"]["last"], "gps", "{status}");

        // pymavlink's own count of what it checked: the agent's heartbeats, all signed
        // with the key, none unsigned, none refused.
        let lines = rig
            .wait_peer("3 of the agent's heartbeats verified", |lines| {
                events(lines, "received", Some("HEARTBEAT")).count() >= 3
            })
            .await;
        let heartbeats: Vec<&Value> = events(&lines, "received", Some("HEARTBEAT")).collect();
        assert!(
            heartbeats
                .iter()
                .all(|h| h["signed"] == true && h["comp"] == 191)
        );
        let counts = &heartbeats.last().unwrap()["signing"];
        assert!(counts["goodsig"].as_u64() >= Some(3), "{counts}");
        assert_eq!(
            (&counts["badsig"], &counts["unsigned"], &counts["reject"]),
            (&Value::from(0), &Value::from(0), &Value::from(0)),
            "{counts}"
        );
        let bad: Vec<&Value> = events(&lines, "bad_input", None).collect();
        assert!(
            bad.is_empty(),
            "pymavlink refused the agent's frames: {bad:?}"
        );
    })
    .await;
}

/// A signed position kept back by the flight controller and sent after newer frames, and
/// a frame sent twice: both carry the key's signature, and both are refused as old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_signed_frame_is_refused() {
    bounded(async {
        let key = key_file(PASSPHRASE);
        let key_path = key.path().to_str().unwrap().to_owned();
        let args = [
            "--signed",
            PASSPHRASE,
            "--system-time",
            GPS_TIME,
            "--vehicle",
            "1,battery=81",
        ];
        let env = [("MAVLINK_SIGNING_KEY_FILE", key_path.as_str())];
        let mut rig = Rig::start(Link::AgentTcpout, &args, &env).await;
        rig.collect_positions(3, 2).await;

        rig.peer.command("withhold 1");
        let lines = rig
            .wait_peer("a position withheld", |lines| {
                events(lines, "withheld", None).next().is_some()
            })
            .await;
        let at = lines.iter().position(|l| l["ev"] == "withheld").unwrap();
        let withheld = lines[at]["fields"].clone();
        // A position the vehicle signed after the withheld one is published: the
        // agent has a newer timestamp of the stream.
        let before = expected_positions(&lines[..at]);
        rig.collect(
            "a position sent after the withheld one published",
            |published, lines| {
                let later: Vec<_> = expected_positions(lines)
                    .into_iter()
                    .filter(|e| !before.contains(e))
                    .collect();
                published
                    .iter()
                    .any(|p| later.iter().any(|e| e.matches(p, true)))
            },
        )
        .await;
        let status = rig.agent.status().unwrap();
        assert_eq!(refused(&status, "old_timestamp"), 0, "{status}");

        rig.peer.command("replay 1");
        rig.agent
            .wait_status("the withheld frame refused", |s| {
                refused(s, "old_timestamp") == 1
            })
            .await;
        rig.peer.command("repeat 1");
        rig.agent
            .wait_status("the repeated frame refused", |s| {
                refused(s, "old_timestamp") == 2
            })
            .await;
        let before = rig.published.len();
        rig.collect("5 more positions published", |published, _| {
            published.len() >= before + 5
        })
        .await;
        let (lat, lon) = (withheld["lat"].as_i64(), withheld["lon"].as_i64());
        for p in &rig.published {
            let place = (
                Some((p.lat * 1e7).round() as i64),
                Some((p.lon * 1e7).round() as i64),
            );
            assert_ne!(place, (lat, lon), "the replayed position was published");
        }
        rig.assert_published_were_sent(1, true).await;
        let status = rig.agent.status().unwrap();
        assert_eq!(
            (
                refused(&status, "unsigned"),
                refused(&status, "bad_signature"),
                refused(&status, "old_timestamp")
            ),
            (0, 0, 2),
            "{status}"
        );
    })
    .await;
}

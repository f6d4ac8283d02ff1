use chrono::TimeDelta;
use mavlink::MavlinkVersion;
use mavlink::dialects::common::{
    GLOBAL_POSITION_INT_DATA, HEARTBEAT_DATA, MavAutopilot, MavModeFlag, MavState, MavType,
};

use super::*;
use crate::source::mavlink::frames::{Decoded, Decoder, encode};

const KEY: &str = "2b8e6b0a6d7e4f1c9a3b5d7f0e2c4a6b8d0f1e3c5a7b9d2f4e6a8c0b1d3f5e7a";
const OTHER_KEY: &str = "0000000000000000000000000000000000000000000000000000000000000001";

/// Frames pymavlink 2.4.50 signed with [`KEY`] (`MAVLink.signing`: the key, `link_id`,
/// `timestamp`, `sign_outgoing`): a HEARTBEAT of an onboard controller from 1/191,
/// sequence 7, link 0, timestamp 37578960000000 (2026-11-28T10:00:00Z)...
const PYMAVLINK_HEARTBEAT: &str =
    "fd0901000701bf0000000000000012080004030a8c0000d48f882d2238c63c93c4da";
/// ...and a GLOBAL_POSITION_INT from 1/1, sequence 0, link 3, timestamp 37578960012345.
const PYMAVLINK_POSITION: &str = "fd1c0100000101210000d2040000002f5f1c78fa12b79cda0100a08601002c019001000078698b8503390490882d22dba9eee7e662";

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn key(hex: &str) -> SigningKey {
    SigningKey::from_hex(hex).unwrap()
}

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

fn position(lat: i32) -> MavMessage {
    MavMessage::GLOBAL_POSITION_INT(GLOBAL_POSITION_INT_DATA {
        time_boot_ms: 1234,
        lat,
        lon: -1_223_493_000,
        alt: 121_500,
        relative_alt: 100_000,
        vx: 300,
        vy: 400,
        vz: 0,
        hdg: 27_000,
    })
}

fn header(system_id: u8, component_id: u8) -> MavHeader {
    MavHeader {
        system_id,
        component_id,
        sequence: 0,
    }
}

fn decode(bytes: &[u8]) -> Frame {
    let mut decoder = Decoder::default();
    decoder.push(bytes);
    match decoder.next() {
        Some(Decoded::Frame(frame)) => *frame,
        other => panic!("{other:?}"),
    }
}

/// A vehicle signing its frames with `key` on its own clock.
struct Sender(Signing);

impl Sender {
    fn new(hex: &str) -> Sender {
        Sender(Signing::new(key(hex)))
    }

    fn send(&mut self, system_id: u8, lat: i32, clock: DateTime<Utc>) -> Vec<u8> {
        self.0.sign(header(system_id, 1), &position(lat), clock)
    }
}

fn timestamp_of(bytes: &[u8]) -> u64 {
    decode(bytes).signed.unwrap().timestamp()
}

#[test]
fn the_key_file_holds_64_hexadecimal_digits() {
    let key = SigningKey::from_hex(&format!("{}\n", KEY.to_uppercase())).unwrap();
    assert_eq!(key.expose().len(), 32);
    assert_eq!(key.expose()[..2], [0x2b, 0x8e]);
    assert_eq!(format!("{key:?}"), "SigningKey(<redacted>)");
    for (wrong, problem) in [
        (&KEY[..63], "63 characters, not 64"),
        ("", "0 characters, not 64"),
        (&format!("{}zz", &KEY[..62]), "not hexadecimal"),
        (&format!("{}éé", &KEY[..60]), "not hexadecimal"),
    ] {
        let err = SigningKey::from_hex(wrong).unwrap_err().to_string();
        assert!(
            err.contains(problem) && err.contains("64 hexadecimal digits"),
            "{wrong:?}: {err}"
        );
    }
}

#[test]
fn pymavlink_signatures_are_accepted_and_the_agent_signs_as_pymavlink_does() {
    let now = at("2026-11-28T10:00:00Z");
    let mut agent = Signing::new(key(KEY));
    let position = decode(&bytes(PYMAVLINK_POSITION));
    let signed = position.signed.as_ref().unwrap();
    assert_eq!(
        (signed.link_id(), signed.timestamp()),
        (3, 37_578_960_012_345)
    );
    assert_eq!(position.message, self::position(476_000_000));
    assert_eq!(agent.check(&position, now), Ok(()));
    assert_eq!(
        Signing::new(key(OTHER_KEY)).check(&position, now),
        Err(Refused::BadSignature)
    );

    let heartbeat = MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        custom_mode: 0,
        mavtype: MavType::MAV_TYPE_ONBOARD_CONTROLLER,
        autopilot: MavAutopilot::MAV_AUTOPILOT_INVALID,
        base_mode: MavModeFlag::empty(),
        system_status: MavState::MAV_STATE_ACTIVE,
        mavlink_version: 3,
    });
    let header = MavHeader {
        system_id: 1,
        component_id: 191,
        sequence: 7,
    };
    let mut fresh = Signing::new(key(KEY));
    assert_eq!(
        fresh.sign(header, &heartbeat, now),
        bytes(PYMAVLINK_HEARTBEAT)
    );
}

#[test]
fn only_frames_signed_with_the_key_are_accepted() {
    let now = at("2026-11-28T10:00:00Z");
    let mut agent = Signing::new(key(KEY));
    let signed = Sender::new(KEY).send(1, 476_000_000, now);
    assert_eq!(agent.check(&decode(&signed), now), Ok(()));

    let unsigned = encode(MavlinkVersion::V2, 0, 1, 1, &position(1));
    let v1 = encode(MavlinkVersion::V1, 0, 1, 1, &position(1));
    assert_eq!(agent.check(&decode(&unsigned), now), Err(Refused::Unsigned));
    assert_eq!(agent.check(&decode(&v1), now), Err(Refused::Unsigned));

    let later = now + TimeDelta::seconds(1);
    let other_key = Sender::new(OTHER_KEY).send(2, 1, later);
    assert_eq!(
        agent.check(&decode(&other_key), later),
        Err(Refused::BadSignature)
    );
    // The key's frame with its signature altered.
    let mut altered = Sender::new(KEY).send(3, 1, later);
    let last = altered.len() - 1;
    altered[last] ^= 0x01;
    assert_eq!(
        agent.check(&decode(&altered), later),
        Err(Refused::BadSignature)
    );
}

#[test]
fn a_stream_s_timestamps_must_increase() {
    let now = at("2026-11-28T10:00:00Z");
    let mut agent = Signing::new(key(KEY));
    let mut vehicle = Sender::new(KEY);
    let withheld = vehicle.send(1, 10, now);
    let first = vehicle.send(1, 20, now);
    let second = vehicle.send(1, 30, now);
    assert!(timestamp_of(&withheld) < timestamp_of(&first));
    assert_eq!(agent.check(&decode(&first), now), Ok(()));
    // The same frame again, and an older one of the same stream never seen before.
    assert_eq!(
        agent.check(&decode(&first), now),
        Err(Refused::OldTimestamp)
    );
    assert_eq!(
        agent.check(&decode(&withheld), now),
        Err(Refused::OldTimestamp)
    );
    assert_eq!(agent.check(&decode(&second), now), Ok(()));
    // Another system's stream is its own: an earlier timestamp there is fine.
    let other = Sender::new(KEY).send(2, 40, now - TimeDelta::seconds(30));
    assert_eq!(agent.check(&decode(&other), now), Ok(()));
}

#[test]
fn a_frame_more_than_a_minute_behind_the_newest_timestamp_is_refused() {
    let now = at("2026-11-28T10:00:00Z");
    let mut agent = Signing::new(key(KEY));
    // A new stream is measured against the board clock.
    let recent = Sender::new(KEY).send(1, 10, now - TimeDelta::seconds(59));
    let stale = Sender::new(KEY).send(2, 20, now - TimeDelta::seconds(61));
    assert_eq!(agent.check(&decode(&recent), now), Ok(()));
    assert_eq!(
        agent.check(&decode(&stale), now),
        Err(Refused::OldTimestamp)
    );
    // And every stream against the newest timestamp accepted, here ahead of the board
    // clock: system 1's next frame, newer than its last, is now too old.
    let ahead = Sender::new(KEY).send(3, 30, now + TimeDelta::minutes(5));
    assert_eq!(agent.check(&decode(&ahead), now), Ok(()));
    let next = Sender::new(KEY).send(1, 40, now + TimeDelta::seconds(1));
    assert_eq!(agent.check(&decode(&next), now), Err(Refused::OldTimestamp));
}

#[test]
fn refused_frames_change_nothing() {
    let now = at("2026-11-28T10:00:00Z");
    let mut agent = Signing::new(key(KEY));
    // Far ahead, but with another key: the newest timestamp does not move...
    let forged = Sender::new(OTHER_KEY).send(1, 10, now + TimeDelta::hours(1));
    assert_eq!(
        agent.check(&decode(&forged), now),
        Err(Refused::BadSignature)
    );
    // ...so the vehicle's own frames are still accepted, and so is its stream.
    let genuine = Sender::new(KEY).send(1, 20, now);
    assert_eq!(agent.check(&decode(&genuine), now), Ok(()));
}

#[test]
fn own_timestamps_count_10_microseconds_since_2015() {
    let mut agent = Signing::new(key(KEY));
    let frame = agent.sign(
        header(1, 191),
        &position(1),
        at("2015-01-01T00:00:01.000020Z"),
    );
    assert_eq!(timestamp_of(&frame), 100_002);
    assert_eq!(decode(&frame).signed.unwrap().link_id(), 0);
    assert_eq!(
        timestamp_at(at("2026-11-28T10:00:00Z")),
        (1_795_860_000 - 1_420_070_400) * 100_000
    );
    assert_eq!(timestamp_at(at("1970-01-01T00:00:00Z")), 0);
}

#[test]
fn own_timestamps_always_increase_even_when_the_clock_steps_back() {
    let mut agent = Signing::new(key(KEY));
    let now = at("2026-11-28T10:00:00Z");
    let mut last = 0;
    for clock in [
        now,
        now,
        now - TimeDelta::hours(2),
        now + TimeDelta::microseconds(3),
        now - TimeDelta::seconds(1),
    ] {
        let timestamp = timestamp_of(&agent.sign(header(1, 191), &position(1), clock));
        assert!(timestamp > last, "{timestamp} after {last}");
        last = timestamp;
    }
    assert_eq!(last, timestamp_at(now) + 4);
}

#[test]
fn a_board_clock_at_1970_signs_after_the_vehicle() {
    let vehicle_clock = at("2026-11-28T10:00:00Z");
    let board = at("1970-01-01T00:05:00Z");
    let mut agent = Signing::new(key(KEY));
    let frame = Sender::new(KEY).send(1, 10, vehicle_clock);
    assert_eq!(agent.check(&decode(&frame), board), Ok(()));
    let own = agent.sign(header(1, 191), &position(1), board);
    assert_eq!(timestamp_of(&own), timestamp_of(&frame) + 1);
}

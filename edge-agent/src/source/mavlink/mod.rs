//! MAVLink from the flight stack, as ArduPilot, PX4, mavlink-router and MAVProxy speak
//! it: MAVLink 1 and 2 frames over UDP, TCP or a serial port ([`MavlinkAddress`]). With a
//! signing key (`MAVLINK_SIGNING_KEY_FILE`) only MAVLink 2 frames signed with it are read;
//! without one, signed frames are read without checking the signature.
//!
//! - [`frames`]: cutting the byte stream into frames, counting what cannot be read.
//! - [`signing`]: which frames carry the key's signature, and the agent's own signatures.
//! - [`vehicle`]: which system is this drone, and what its messages say.
//! - [`link`]: the bytes' way in and out.
//!
//! The agent speaks too: a `HEARTBEAT` every second as an onboard controller
//! (`MAV_TYPE_ONBOARD_CONTROLLER`, `MAV_AUTOPILOT_INVALID`, component
//! `MAV_COMP_ID_ONBOARD_COMPUTER`) under the vehicle's system id, so that routers forward
//! to it (a mavlink-router server endpoint sends nothing to a client that never spoke)
//! and the autopilot sees its companion. It speaks the vehicle's MAVLink version once the
//! vehicle is chosen, MAVLink 2 before; signed MAVLink 2 when it has a key.

mod address;
mod frames;
mod link;
mod signing;
mod vehicle;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use mavlink::dialects::common::{
    HEARTBEAT_DATA, MavAutopilot, MavMessage, MavModeFlag, MavState, MavType,
};
use mavlink::{MavHeader, MavlinkVersion};

pub use address::MavlinkAddress;
use frames::{Decoded, Decoder};
use link::Link;
pub use signing::SigningKey;
use signing::{Refused, Signing};
use vehicle::{Chosen, Outcome, Vehicle};

use super::{FixSink, SourceError};
use crate::status::{self, MavlinkStatus, RefusedFrames};

/// `MAV_COMP_ID_ONBOARD_COMPUTER`.
const ONBOARD_COMPUTER: u8 = 191;
/// The system id heartbeats carry before a vehicle is chosen (autopilots default to 1).
const DEFAULT_SYSTEM_ID: u8 = 1;
const HEARTBEAT_PERIOD: Duration = Duration::from_secs(1);

/// The MAVLink source's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MavlinkConfig {
    /// Where the flight stack is.
    pub address: MavlinkAddress,
    /// The vehicle's system id (`MAVLINK_SYSTEM_ID`); `None`: the first autopilot heard.
    pub system_id: Option<u8>,
    /// The key frames must be signed with (`MAVLINK_SIGNING_KEY_FILE`); `None`: frames
    /// are not checked, and the agent's own are not signed.
    pub signing_key: Option<SigningKey>,
}

/// What the link's reader keeps across reconnects: the vehicle chosen, and the signing
/// state (a frame replayed after a reconnect is still refused).
#[derive(Debug, Clone, Default)]
pub(crate) struct LinkMemory(Arc<Mutex<Memory>>);

#[derive(Debug, Default)]
struct Memory {
    vehicle: Option<Chosen>,
    signing: Option<Signing>,
}

impl LinkMemory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.0.lock().expect("link memory lock")
    }
}

/// Reads the flight stack at `config.address` and feeds `sink` until the link fails.
pub(crate) async fn run(
    config: MavlinkConfig,
    memory: LinkMemory,
    sink: FixSink,
) -> Result<(), SourceError> {
    let mut link = Link::open(&config.address).await?;
    let remembered = {
        let mut memory = memory.lock();
        if let (None, Some(key)) = (&memory.signing, &config.signing_key) {
            memory.signing = Some(Signing::new(key.clone()));
        }
        memory.vehicle
    };
    let mut vehicle = Vehicle::new(config.system_id, remembered);
    let mut decoder = Decoder::default();
    let mut heartbeats = tokio::time::interval(HEARTBEAT_PERIOD);
    let mut sequence = 0u8;
    let mut buf = vec![0; 4096];
    let signed = config.signing_key.is_some();
    sink.status().update(|s| {
        let m = s.mavlink.get_or_insert_with(MavlinkStatus::default);
        if signed {
            m.refused.get_or_insert_with(RefusedFrames::default);
        }
    });
    loop {
        tokio::select! {
            _ = heartbeats.tick() => {
                let frame = heartbeat(&mut memory.lock(), config.system_id, sequence, Utc::now());
                sequence = sequence.wrapping_add(1);
                if link.send(&frame).await? {
                    update(&sink, |m| m.heartbeats_sent += 1);
                }
            }
            read = link.recv(&mut buf) => {
                let read = read?;
                if read == 0 {
                    return Err(SourceError::Closed);
                }
                decoder.push(&buf[..read]);
                while let Some(decoded) = decoder.next() {
                    handle(decoded, &mut vehicle, &memory, &sink);
                }
            }
        }
    }
}

fn handle(decoded: Decoded, vehicle: &mut Vehicle, memory: &LinkMemory, sink: &FixSink) {
    let frame = match decoded {
        Decoded::Frame(frame) => frame,
        Decoded::Unknown { message_id } => {
            tracing::trace!(message_id, "MAVLink message outside the common set ignored");
            update(sink, |m| m.unknown_messages += 1);
            return;
        }
        Decoded::Unreadable(what) => {
            let mut first = false;
            update(sink, |m| {
                first = m.unreadable == 0;
                m.unreadable += 1;
            });
            if first {
                tracing::warn!(%what, "unreadable MAVLink data (counted in the status as mavlink.unreadable; logged once)");
            } else {
                tracing::debug!(%what, "unreadable MAVLink data");
            }
            return;
        }
    };
    let checked = match &mut memory.lock().signing {
        Some(signing) => signing.check(&frame, Utc::now()),
        None => Ok(()),
    };
    if let Err(reason) = checked {
        refused(sink, reason, &frame);
        return;
    }
    match vehicle.on_frame(&frame, Utc::now()) {
        Outcome::Chosen(vehicle) => {
            tracing::info!(
                system_id = vehicle.system_id,
                component_id = vehicle.component_id,
                version = ?vehicle.version,
                "MAVLink vehicle chosen"
            );
            memory.lock().vehicle = Some(vehicle);
            update(sink, |m| {
                m.vehicle = Some(status::Vehicle {
                    system_id: vehicle.system_id,
                    component_id: vehicle.component_id,
                });
                m.version = Some(match vehicle.version {
                    MavlinkVersion::V1 => status::MavlinkVersion::V1,
                    MavlinkVersion::V2 => status::MavlinkVersion::V2,
                });
            });
        }
        Outcome::Fix(fix) => sink.fix(fix),
        Outcome::NoFix => sink.no_fix(),
        Outcome::GpsTime(gps) => sink.gps_time(gps),
        Outcome::OtherSystem => {
            let mut first = false;
            update(sink, |m| {
                first = m.ignored_other_systems == 0;
                m.ignored_other_systems += 1;
            });
            if first {
                tracing::info!(
                    system_id = frame.system_id,
                    "messages of another MAVLink system on the link are ignored (counted as mavlink.ignored_other_systems)"
                );
            }
        }
        Outcome::Nothing => {}
    }
}

/// Counts a frame refused for its signature; the first of each reason is logged.
fn refused(sink: &FixSink, reason: Refused, frame: &frames::Frame) {
    let mut count = 0;
    update(sink, |m| {
        count = reason.count(m.refused.get_or_insert_with(RefusedFrames::default));
    });
    if count == 1 {
        tracing::warn!(
            system_id = frame.system_id,
            component_id = frame.component_id,
            counted_as = reason.field(),
            "{reason} refused (logged once per reason)"
        );
    } else {
        tracing::debug!(
            system_id = frame.system_id,
            component_id = frame.component_id,
            "{reason} refused"
        );
    }
}

fn update(sink: &FixSink, change: impl FnOnce(&mut MavlinkStatus)) {
    sink.status()
        .update(|s| change(s.mavlink.get_or_insert_with(MavlinkStatus::default)));
}

/// The agent's own `HEARTBEAT` frame, signed when the link has a key; `now` is the board
/// clock.
fn heartbeat(
    memory: &mut Memory,
    configured: Option<u8>,
    sequence: u8,
    now: DateTime<Utc>,
) -> Vec<u8> {
    let chosen = memory.vehicle;
    let header = MavHeader {
        system_id: chosen
            .map(|c| c.system_id)
            .or(configured)
            .unwrap_or(DEFAULT_SYSTEM_ID),
        component_id: ONBOARD_COMPUTER,
        sequence,
    };
    let message = MavMessage::HEARTBEAT(HEARTBEAT_DATA {
        custom_mode: 0,
        mavtype: MavType::MAV_TYPE_ONBOARD_CONTROLLER,
        autopilot: MavAutopilot::MAV_AUTOPILOT_INVALID,
        base_mode: MavModeFlag::empty(),
        system_status: MavState::MAV_STATE_ACTIVE,
        mavlink_version: 3,
    });
    match &mut memory.signing {
        Some(signing) => signing.sign(header, &message, now),
        None => {
            let version = chosen.map_or(MavlinkVersion::V2, |c| c.version);
            frames::encode(
                version,
                sequence,
                header.system_id,
                ONBOARD_COMPUTER,
                &message,
            )
        }
    }
}

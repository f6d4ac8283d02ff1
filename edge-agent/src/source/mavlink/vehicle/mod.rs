//! Which vehicle on the link is this drone, and what its messages say: a pure state
//! machine, no I/O.
//!
//! - The vehicle is the system `MAVLINK_SYSTEM_ID` names or, by default, the first
//!   system whose `HEARTBEAT` comes from an autopilot (`autopilot` other than
//!   `MAV_AUTOPILOT_INVALID`); it is chosen once, with the component that sent that
//!   heartbeat, and kept. Only that system and component's messages are read: another
//!   vehicle on a shared radio or router never speaks for this drone.
//! - Position: `GLOBAL_POSITION_INT` (the autopilot's fused estimate); `GPS_RAW_INT` only
//!   while the vehicle has sent no `GLOBAL_POSITION_INT`. Battery: `SYS_STATUS`.
//! - GNSS health ([`gnss_health`]): from `GPS_RAW_INT`, attached to a
//!   `GLOBAL_POSITION_INT` when it arrived at most [`HEALTH_MAX_AGE`] before it (board
//!   clock; autopilots stream `GPS_RAW_INT` at 1 Hz or more), otherwise left out. Fix type
//!   from `fix_type`; `satellites_visible` as visible satellites (the message does not say
//!   how many are used); `h_acc` (mm, a MAVLink 2 extension) as the accuracy. `eph` is an
//!   HDOP, not metres, and is not used.
//! - Time: `SYSTEM_TIME` maps the autopilot's boot time to UNIX time once it has GPS time
//!   (`time_unix_usec` non-zero), so a position's GPS time is the mapping applied to its
//!   `time_boot_ms`; `GPS_RAW_INT.time_usec` above [`UNIX_USEC_FLOOR`] is UNIX time
//!   itself (ArduPilot), below it boot time (PX4). A mapping is applied from
//!   [`MAPPING_BEFORE`] before its boot time (messages sent out of order) to
//!   [`MAPPING_AFTER`] after it; a position further back is from before an autopilot
//!   reboot's new boot time, and the board clock stamps it.

use chrono::{DateTime, TimeDelta, Utc};
use mavlink::MavlinkVersion;
use mavlink::dialects::common::{
    GLOBAL_POSITION_INT_DATA, GPS_RAW_INT_DATA, GpsFixType, MavAutopilot, MavMessage,
};
use telemetry::{FixType, Gnss};

use super::frames::Frame;
use crate::source::{Fix, FixTime};

/// `hdg` and `cog` value meaning "unknown".
const ANGLE_UNKNOWN: u16 = u16::MAX;
/// `GPS_RAW_INT.vel` value meaning "unknown".
const SPEED_UNKNOWN: u16 = u16::MAX;
/// `GPS_RAW_INT.satellites_visible` value meaning "unknown".
const SATELLITES_UNKNOWN: u8 = u8::MAX;
/// The oldest `GPS_RAW_INT` whose health a `GLOBAL_POSITION_INT` carries: three periods
/// of the slowest usual stream (1 Hz).
const HEALTH_MAX_AGE: TimeDelta = TimeDelta::seconds(3);
/// `time_usec` values from 2001-09-09 on are UNIX time; smaller ones are time since boot.
pub(super) const UNIX_USEC_FLOOR: u64 = 1_000_000_000_000_000;
/// How far before its own boot time a `SYSTEM_TIME` mapping is applied.
const MAPPING_BEFORE: TimeDelta = TimeDelta::seconds(5);
/// How far after its own boot time a `SYSTEM_TIME` mapping is applied (autopilots send
/// `SYSTEM_TIME` every second or so; the autopilot's clock drifts far less than a
/// millisecond in this span).
const MAPPING_AFTER: TimeDelta = TimeDelta::minutes(10);

/// The chosen vehicle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Chosen {
    pub(super) system_id: u8,
    pub(super) component_id: u8,
    pub(super) version: MavlinkVersion,
}

/// What one frame means for the drone.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    /// The vehicle was chosen with this frame.
    Chosen(Chosen),
    /// A position.
    Fix(Fix),
    /// The vehicle reports no position.
    NoFix,
    /// The vehicle's GPS time now.
    GpsTime(DateTime<Utc>),
    /// A message of another system, ignored.
    OtherSystem,
    /// Nothing for the drone (another component, a message not used, before a vehicle).
    Nothing,
}

/// The state of the vehicle as its messages tell it.
#[derive(Debug, Clone)]
pub(super) struct Vehicle {
    wanted: Option<u8>,
    chosen: Option<Chosen>,
    battery_pct: Option<u8>,
    /// `SYSTEM_TIME`: UNIX time (µs) at boot time (ms).
    system_time: Option<(u64, u32)>,
    global_position_seen: bool,
    /// The health of the latest `GPS_RAW_INT`, and the board time it arrived.
    health: Option<(DateTime<Utc>, Gnss)>,
}

impl Vehicle {
    /// Follows system `wanted`, or the first autopilot that sends a heartbeat; a vehicle
    /// already chosen (before a reconnect) stays chosen.
    pub(super) fn new(wanted: Option<u8>, chosen: Option<Chosen>) -> Vehicle {
        Vehicle {
            wanted,
            chosen,
            battery_pct: None,
            system_time: None,
            global_position_seen: false,
            health: None,
        }
    }

    /// What `frame` means; `board` is the board clock now, stamping positions without
    /// GPS time.
    pub(super) fn on_frame(&mut self, frame: &Frame, board: DateTime<Utc>) -> Outcome {
        let Some(chosen) = self.chosen else {
            return self.choose(frame);
        };
        if frame.system_id != chosen.system_id {
            return Outcome::OtherSystem;
        }
        if frame.component_id != chosen.component_id {
            return Outcome::Nothing;
        }
        match &frame.message {
            MavMessage::GLOBAL_POSITION_INT(position) => {
                self.global_position_seen = true;
                let time = self.gps_time_at_boot_ms(position.time_boot_ms);
                match global_position_fix(position, self.battery_pct, stamp(time, board)) {
                    Some(fix) => Outcome::Fix(Fix {
                        gnss: self.health_at(board),
                        ..fix
                    }),
                    None => Outcome::NoFix,
                }
            }
            MavMessage::GPS_RAW_INT(gps) => {
                self.health = Some((board, gnss_health(gps)));
                if self.global_position_seen {
                    return Outcome::Nothing;
                }
                let time = if gps.time_usec >= UNIX_USEC_FLOOR {
                    unix_usec(gps.time_usec)
                } else {
                    let boot_ms = u32::try_from(gps.time_usec / 1000).unwrap_or(u32::MAX);
                    self.gps_time_at_boot_ms(boot_ms)
                };
                match gps_raw_fix(gps, self.battery_pct, stamp(time, board)) {
                    Some(fix) => Outcome::Fix(fix),
                    None => Outcome::NoFix,
                }
            }
            MavMessage::SYS_STATUS(status) => {
                self.battery_pct = u8::try_from(status.battery_remaining)
                    .ok()
                    .filter(|pct| *pct <= 100);
                Outcome::Nothing
            }
            MavMessage::SYSTEM_TIME(time) if time.time_unix_usec != 0 => {
                self.system_time = Some((time.time_unix_usec, time.time_boot_ms));
                unix_usec(time.time_unix_usec).map_or(Outcome::Nothing, Outcome::GpsTime)
            }
            _ => Outcome::Nothing,
        }
    }

    fn choose(&mut self, frame: &Frame) -> Outcome {
        let MavMessage::HEARTBEAT(heartbeat) = &frame.message else {
            return self.not_chosen(frame);
        };
        let autopilot = heartbeat.autopilot != MavAutopilot::MAV_AUTOPILOT_INVALID;
        let wanted = self.wanted.is_none_or(|id| id == frame.system_id);
        if !(autopilot && wanted) {
            return self.not_chosen(frame);
        }
        let chosen = Chosen {
            system_id: frame.system_id,
            component_id: frame.component_id,
            version: frame.version,
        };
        self.chosen = Some(chosen);
        Outcome::Chosen(chosen)
    }

    /// Before a vehicle is chosen: a configured vehicle's messages wait for its
    /// heartbeat; any other system's are another's.
    fn not_chosen(&self, frame: &Frame) -> Outcome {
        match self.wanted {
            Some(id) if id != frame.system_id => Outcome::OtherSystem,
            _ => Outcome::Nothing,
        }
    }

    /// The latest `GPS_RAW_INT` health if it arrived within [`HEALTH_MAX_AGE`] before
    /// `board` (a board clock that stepped back makes it stale too).
    fn health_at(&self, board: DateTime<Utc>) -> Gnss {
        self.health
            .filter(|(at, _)| (TimeDelta::zero()..=HEALTH_MAX_AGE).contains(&(board - *at)))
            .map_or_else(Gnss::default, |(_, gnss)| gnss)
    }

    /// The GPS time at the autopilot's boot time `boot_ms`, if `SYSTEM_TIME` maps it.
    fn gps_time_at_boot_ms(&self, boot_ms: u32) -> Option<DateTime<Utc>> {
        let (unix_us, mapped_ms) = self.system_time?;
        let span = TimeDelta::milliseconds(i64::from(boot_ms) - i64::from(mapped_ms));
        if span < -MAPPING_BEFORE || span > MAPPING_AFTER {
            return None;
        }
        unix_usec(unix_us).map(|at| at + span)
    }
}

fn unix_usec(usec: u64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(i64::try_from(usec).ok()?)
}

fn stamp(gps: Option<DateTime<Utc>>, board: DateTime<Utc>) -> FixTime {
    gps.map_or(FixTime::Board(board), FixTime::Gps)
}

/// The fix in a `GLOBAL_POSITION_INT`, or `None` before the autopilot has one (it sends
/// exactly 0,0 then).
pub(super) fn global_position_fix(
    position: &GLOBAL_POSITION_INT_DATA,
    battery_pct: Option<u8>,
    time: FixTime,
) -> Option<Fix> {
    if position.lat == 0 && position.lon == 0 {
        return None;
    }
    let (vx, vy) = (f64::from(position.vx), f64::from(position.vy));
    Some(Fix {
        time,
        lat: f64::from(position.lat) / 1e7,
        lon: f64::from(position.lon) / 1e7,
        alt_m: Some(f64::from(position.alt) / 1000.0),
        heading_deg: (position.hdg != ANGLE_UNKNOWN).then(|| f64::from(position.hdg) / 100.0),
        speed_mps: Some(vx.hypot(vy) / 100.0),
        battery_pct,
        gnss: Gnss::default(),
    })
}

/// The fix in a `GPS_RAW_INT`, or `None` below a 2D fix.
fn gps_raw_fix(gps: &GPS_RAW_INT_DATA, battery_pct: Option<u8>, time: FixTime) -> Option<Fix> {
    let fixed = !matches!(
        gps.fix_type,
        GpsFixType::GPS_FIX_TYPE_NO_GPS | GpsFixType::GPS_FIX_TYPE_NO_FIX
    );
    if !fixed {
        return None;
    }
    Some(Fix {
        time,
        lat: f64::from(gps.lat) / 1e7,
        lon: f64::from(gps.lon) / 1e7,
        alt_m: Some(f64::from(gps.alt) / 1000.0),
        heading_deg: (gps.cog != ANGLE_UNKNOWN).then(|| f64::from(gps.cog) / 100.0),
        speed_mps: (gps.vel != SPEED_UNKNOWN).then(|| f64::from(gps.vel) / 100.0),
        battery_pct,
        gnss: gnss_health(gps),
    })
}

/// The GNSS health a `GPS_RAW_INT` reports, by `common.xml`'s definitions: nothing without
/// a receiver (`NO_GPS`); `STATIC` (a base station's surveyed position) has no fix type
/// here, and `PPP` ("PPP, 3D position") is a 3D fix. `satellites_visible` 255 and `h_acc`
/// 0 are unknown (an extension field reads 0 when the sender left it out, as MAVLink 1
/// frames always do).
fn gnss_health(gps: &GPS_RAW_INT_DATA) -> Gnss {
    let fix = match gps.fix_type {
        GpsFixType::GPS_FIX_TYPE_NO_GPS => return Gnss::default(),
        GpsFixType::GPS_FIX_TYPE_NO_FIX => Some(FixType::None),
        GpsFixType::GPS_FIX_TYPE_2D_FIX => Some(FixType::Fix2d),
        GpsFixType::GPS_FIX_TYPE_3D_FIX | GpsFixType::GPS_FIX_TYPE_PPP => Some(FixType::Fix3d),
        GpsFixType::GPS_FIX_TYPE_DGPS => Some(FixType::Dgps),
        GpsFixType::GPS_FIX_TYPE_RTK_FLOAT => Some(FixType::RtkFloat),
        GpsFixType::GPS_FIX_TYPE_RTK_FIXED => Some(FixType::RtkFixed),
        GpsFixType::GPS_FIX_TYPE_STATIC => None,
    };
    Gnss {
        fix,
        sats: None,
        sats_visible: (gps.satellites_visible != SATELLITES_UNKNOWN)
            .then_some(gps.satellites_visible),
        h_acc_m: (gps.h_acc != 0).then(|| f64::from(gps.h_acc) / 1000.0),
    }
}

#[cfg(test)]
mod tests;

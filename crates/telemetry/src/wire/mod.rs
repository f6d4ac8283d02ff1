//! The wire message, version 1: one drone position, device to cloud, as UTF-8 JSON.
//!
//! Owns the message's fields, its validation rules and their typed reasons ([`Invalid`]),
//! and the codec ([`decode`], [`Position::encode`]). Version 2, a batch of version 1
//! messages, is [`batch`]'s; [`decode_message`] reads both.
//!
//! ```json
//! {"v":1,"deviceId":"drone-0042","seq":1834,"ts":"2026-11-22T09:15:02.500Z",
//!  "lat":47.6205,"lon":-122.3493,"altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81,
//!  "fix":"3d","sats":12,"satsVisible":14,"hAccM":1.5}
//! ```
//!
//! `v`, `deviceId`, `seq`, `ts`, `lat` and `lon` are required; `altM`, `headingDeg`,
//! `speedMps` and `batteryPct` are optional (absent or `null`), and so is the GNSS health
//! ([`Gnss`]): `fix` (one of `none`, `2d`, `3d`, `dgps`, `rtkFloat`, `rtkFixed`), `sats`
//! (satellites used in the fix), `satsVisible` (satellites visible) and `hAccM` (horizontal
//! accuracy in metres as the receiver estimates it; never a dilution of precision). A
//! device writes only what its source reported. The health costs up to about 60 bytes a
//! message: a 4 KB batch holds a few positions fewer.
//!
//! Unknown fields are ignored so that newer devices can add fields without breaking older
//! readers, and so is a `fix` name this reader does not know; a different `v` is a
//! different major version and is rejected. Times follow the policy of [`crate::time`]:
//! any RFC 3339 time is read (offsets normalised to UTC), truncated to milliseconds;
//! encoding always writes `YYYY-MM-DDTHH:MM:SS.mmmZ`.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::order::PositionOrder;
use crate::time::{self, MillisTime, TimeError};

mod batch;
mod gnss;
mod scan;

pub use batch::{BATCH_MAX_BYTES, BATCH_VERSION, Batch, BatchBuilder, Decoded, decode_message};
pub use gnss::{FixType, Gnss};

/// The major version this crate reads and writes (the `v` field).
pub const WIRE_VERSION: u64 = 1;

/// The largest message accepted, in bytes: IoT Hub's device-to-cloud message limit.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The longest device id IoT Hub accepts, in characters (all allowed characters are ASCII).
pub const MAX_DEVICE_ID_LEN: usize = 128;

/// One position report of one drone.
#[derive(Debug, Clone, PartialEq)]
pub struct Position {
    /// The IoT Hub device id of the drone.
    pub device_id: String,
    /// The device's message counter; breaks ties between equal device times.
    pub seq: u64,
    /// When the device took the position (device clock, UTC, millisecond resolution on the wire).
    pub ts: DateTime<Utc>,
    /// Latitude in degrees, WGS-84, in [-90, 90].
    pub lat: f64,
    /// Longitude in degrees, WGS-84, in [-180, 180].
    pub lon: f64,
    /// Altitude in metres.
    pub alt_m: Option<f64>,
    /// Heading in degrees.
    pub heading_deg: Option<f64>,
    /// Ground speed in metres per second.
    pub speed_mps: Option<f64>,
    /// Battery charge in percent, 0 to 100.
    pub battery_pct: Option<u8>,
    /// The GNSS health the source reported with the position.
    pub gnss: Gnss,
}

/// Why a message or a [`Position`] is not a valid version 1 position. One variant per
/// reason; [`Invalid::reason`] gives a stable label for metrics.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Invalid {
    /// The message is larger than [`MAX_MESSAGE_BYTES`].
    #[error("message is {size} bytes, over the limit of {MAX_MESSAGE_BYTES} bytes")]
    TooLarge {
        /// The message size in bytes.
        size: usize,
    },
    /// The bytes are not a JSON object of the expected field types.
    #[error("not a JSON position message: {detail}")]
    Json {
        /// What the JSON parser reported.
        detail: String,
    },
    /// A required field is absent (or `null`).
    #[error("required field `{field}` is missing")]
    MissingField {
        /// The wire name of the field.
        field: &'static str,
    },
    /// The message is of another major version.
    #[error(
        "wire version {found} is not supported (this reader reads version {WIRE_VERSION}, one position, and version {BATCH_VERSION}, a batch of them)"
    )]
    UnsupportedVersion {
        /// The `v` the message carries.
        found: u64,
    },
    /// The latitude is outside [-90, 90].
    #[error("latitude {value} is outside [-90, 90]")]
    Latitude {
        /// The rejected value.
        value: f64,
    },
    /// The longitude is outside [-180, 180].
    #[error("longitude {value} is outside [-180, 180]")]
    Longitude {
        /// The rejected value.
        value: f64,
    },
    /// A numeric field is NaN or infinite.
    #[error("field `{field}` is not a finite number")]
    NotFinite {
        /// The wire name of the field.
        field: &'static str,
    },
    /// The battery percentage is above 100.
    #[error("battery percentage {value} is above 100")]
    Battery {
        /// The rejected value.
        value: u64,
    },
    /// A satellite count is above 255.
    #[error("field `{field}` is {value}, above 255 satellites")]
    Satellites {
        /// The wire name of the field.
        field: &'static str,
        /// The rejected value.
        value: u64,
    },
    /// The horizontal accuracy is negative.
    #[error("horizontal accuracy {value} m is negative")]
    Accuracy {
        /// The rejected value.
        value: f64,
    },
    /// The `ts` field is not an acceptable RFC 3339 time.
    #[error("field `ts` is invalid: {0}")]
    Timestamp(#[from] TimeError),
    /// The device id breaks IoT Hub's device id rules.
    #[error("field `deviceId` is invalid: {0}")]
    DeviceId(#[from] DeviceIdError),
}

impl Invalid {
    /// Why, as one of a fixed set of reasons (for metrics).
    pub fn reason(&self) -> InvalidReason {
        match self {
            Invalid::TooLarge { .. } => InvalidReason::TooLarge,
            Invalid::Json { .. } => InvalidReason::Json,
            Invalid::MissingField { .. } => InvalidReason::MissingField,
            Invalid::UnsupportedVersion { .. } => InvalidReason::Version,
            Invalid::Latitude { .. } => InvalidReason::Latitude,
            Invalid::Longitude { .. } => InvalidReason::Longitude,
            Invalid::NotFinite { .. } => InvalidReason::NotFinite,
            Invalid::Battery { .. } => InvalidReason::Battery,
            Invalid::Satellites { .. } => InvalidReason::Satellites,
            Invalid::Accuracy { .. } => InvalidReason::Accuracy,
            Invalid::Timestamp(_) => InvalidReason::Timestamp,
            Invalid::DeviceId(_) => InvalidReason::DeviceId,
        }
    }
}

/// Why a message is [`Invalid`], without the detail: the label of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InvalidReason {
    /// [`Invalid::TooLarge`].
    TooLarge,
    /// [`Invalid::Json`].
    Json,
    /// [`Invalid::MissingField`].
    MissingField,
    /// [`Invalid::UnsupportedVersion`].
    Version,
    /// [`Invalid::Latitude`].
    Latitude,
    /// [`Invalid::Longitude`].
    Longitude,
    /// [`Invalid::NotFinite`].
    NotFinite,
    /// [`Invalid::Battery`].
    Battery,
    /// [`Invalid::Satellites`].
    Satellites,
    /// [`Invalid::Accuracy`].
    Accuracy,
    /// [`Invalid::Timestamp`].
    Timestamp,
    /// [`Invalid::DeviceId`].
    DeviceId,
}

impl InvalidReason {
    /// Every reason, e.g. to pre-register metric series.
    pub const ALL: [InvalidReason; 12] = [
        InvalidReason::TooLarge,
        InvalidReason::Json,
        InvalidReason::MissingField,
        InvalidReason::Version,
        InvalidReason::Latitude,
        InvalidReason::Longitude,
        InvalidReason::NotFinite,
        InvalidReason::Battery,
        InvalidReason::Satellites,
        InvalidReason::Accuracy,
        InvalidReason::Timestamp,
        InvalidReason::DeviceId,
    ];

    /// A stable snake_case label.
    pub const fn as_str(self) -> &'static str {
        match self {
            InvalidReason::TooLarge => "too_large",
            InvalidReason::Json => "json",
            InvalidReason::MissingField => "missing_field",
            InvalidReason::Version => "version",
            InvalidReason::Latitude => "latitude",
            InvalidReason::Longitude => "longitude",
            InvalidReason::NotFinite => "not_finite",
            InvalidReason::Battery => "battery",
            InvalidReason::Satellites => "satellites",
            InvalidReason::Accuracy => "accuracy",
            InvalidReason::Timestamp => "timestamp",
            InvalidReason::DeviceId => "device_id",
        }
    }
}

impl std::fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a string is not an IoT Hub device id: 1 to 128 characters, each an ASCII letter or
/// digit or one of `- : . + % _ # * ? ! ( ) , = @ ; $ '` (IoT Hub identity registry rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeviceIdError {
    /// The id is empty.
    #[error("device id is empty")]
    Empty,
    /// The id is longer than [`MAX_DEVICE_ID_LEN`] characters.
    #[error("device id has {len} bytes, more than {MAX_DEVICE_ID_LEN} characters")]
    TooLong {
        /// The id's length in bytes.
        len: usize,
    },
    /// The id holds a character outside IoT Hub's allowed set.
    #[error(
        "device id has {ch:?} at byte {index}; allowed are ASCII letters, digits and - : . + % _ # * ? ! ( ) , = @ ; $ '"
    )]
    Character {
        /// The offending character.
        ch: char,
        /// Its byte offset in the id.
        index: usize,
    },
}

/// The special characters IoT Hub allows in a device id besides ASCII letters and digits.
const DEVICE_ID_SPECIALS: &[u8] = b"-:.+%_#*?!(),=@;$'";

/// Allowed device id bytes, indexed by byte value.
const DEVICE_ID_ALLOWED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    while i < DEVICE_ID_SPECIALS.len() {
        table[DEVICE_ID_SPECIALS[i] as usize] = true;
        i += 1;
    }
    table
};

/// Checks `id` against IoT Hub's device id rules.
pub fn check_device_id(id: &str) -> Result<(), DeviceIdError> {
    if id.is_empty() {
        return Err(DeviceIdError::Empty);
    }
    if let Some(index) = id.bytes().position(|b| !DEVICE_ID_ALLOWED[usize::from(b)]) {
        let ch = id[index..].chars().next().unwrap_or('\u{fffd}');
        return Err(DeviceIdError::Character { ch, index });
    }
    // All allowed characters are one byte long, so bytes count characters here.
    if id.len() > MAX_DEVICE_ID_LEN {
        return Err(DeviceIdError::TooLong { len: id.len() });
    }
    Ok(())
}

/// Checks that `value` of the field `field` is finite.
fn finite(field: &'static str, value: f64) -> Result<(), Invalid> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(Invalid::NotFinite { field })
    }
}

impl Position {
    /// Checks every rule of the format: device id, time, finite numbers, coordinate
    /// ranges, battery percentage, accuracy. Reports the first broken rule.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_device_id(&self.device_id)?;
        time::check_year(&self.ts)?;
        finite("lat", self.lat)?;
        if !(-90.0..=90.0).contains(&self.lat) {
            return Err(Invalid::Latitude { value: self.lat });
        }
        finite("lon", self.lon)?;
        if !(-180.0..=180.0).contains(&self.lon) {
            return Err(Invalid::Longitude { value: self.lon });
        }
        for (field, value) in [
            ("altM", self.alt_m),
            ("headingDeg", self.heading_deg),
            ("speedMps", self.speed_mps),
        ] {
            if let Some(value) = value {
                finite(field, value)?;
            }
        }
        if let Some(pct) = self.battery_pct.filter(|pct| *pct > 100) {
            return Err(Invalid::Battery {
                value: u64::from(pct),
            });
        }
        self.gnss.validate()
    }

    /// Validates, then writes the version 1 JSON message. `ts` is written with
    /// millisecond precision and a `Z` suffix (finer digits are dropped); absent optional
    /// fields are left out.
    pub fn encode(&self) -> Result<Vec<u8>, Invalid> {
        let mut out = Vec::with_capacity(192);
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Like [`Position::encode`], appending to `out` (nothing is appended on error).
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), Invalid> {
        self.validate()?;
        let message = WireOut {
            v: WIRE_VERSION,
            device_id: &self.device_id,
            seq: self.seq,
            ts: MillisTime(self.ts),
            lat: self.lat,
            lon: self.lon,
            alt_m: self.alt_m,
            heading_deg: self.heading_deg,
            speed_mps: self.speed_mps,
            battery_pct: self.battery_pct,
            fix: self.gnss.fix.map(FixType::as_str),
            sats: self.gnss.sats,
            sats_visible: self.gnss.sats_visible,
            h_acc_m: self.gnss.h_acc_m,
        };
        serde_json::to_writer(out, &message).expect("writing JSON into a Vec cannot fail");
        Ok(())
    }

    /// This position's place in the newest-wins order of its drone.
    pub fn order(&self) -> PositionOrder {
        PositionOrder::of(self.ts, self.seq)
    }
}

/// The message as written: borrows from the [`Position`].
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireOut<'a> {
    v: u64,
    device_id: &'a str,
    seq: u64,
    ts: MillisTime,
    lat: f64,
    lon: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    alt_m: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heading_deg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    speed_mps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    battery_pct: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sats: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sats_visible: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    h_acc_m: Option<f64>,
}

/// The message as read: strings borrow from the input unless they hold escapes; every
/// field is optional here so that absence gets its own typed reason.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireIn<'a> {
    v: Option<u64>,
    #[serde(borrow)]
    device_id: Option<Cow<'a, str>>,
    seq: Option<u64>,
    #[serde(borrow)]
    ts: Option<Cow<'a, str>>,
    lat: Option<f64>,
    lon: Option<f64>,
    alt_m: Option<f64>,
    heading_deg: Option<f64>,
    speed_mps: Option<f64>,
    battery_pct: Option<u64>,
    #[serde(borrow)]
    fix: Option<Cow<'a, str>>,
    sats: Option<u64>,
    sats_visible: Option<u64>,
    h_acc_m: Option<f64>,
}

/// Reads only `v`, to name the version of a message that does not parse as version 1.
#[derive(Deserialize)]
struct VersionProbe {
    v: Option<u64>,
}

/// Decodes and validates one message: size limit, JSON, version, required fields, rules.
///
/// Messages of the usual shape are read by a single-pass scanner; anything it does not
/// handle (escapes, nested values, duplicate fields, syntax errors, ...) is read by
/// [`decode_reference`]. The result is always exactly that of [`decode_reference`].
pub fn decode(bytes: &[u8]) -> Result<Position, Invalid> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(Invalid::TooLarge { size: bytes.len() });
    }
    match scan::scan(bytes) {
        Some(raw) => raw.into_position(),
        None => decode_reference(bytes),
    }
}

/// The reference decoder: the same result as [`decode`], read by serde_json. Slower; it
/// is the specification the fast path of [`decode`] is tested against.
pub fn decode_reference(bytes: &[u8]) -> Result<Position, Invalid> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(Invalid::TooLarge { size: bytes.len() });
    }
    // Validating UTF-8 once up front is cheaper than per string, as the slice reader does.
    let text = std::str::from_utf8(bytes).map_err(|err| Invalid::Json {
        detail: format!("not UTF-8: {err}"),
    })?;
    let raw: WireIn<'_> = serde_json::from_str(text).map_err(|err| {
        // Another major version may use other field types: name the version if it can be read.
        match serde_json::from_str::<VersionProbe>(text) {
            Ok(VersionProbe { v: Some(found) }) if found != WIRE_VERSION => {
                Invalid::UnsupportedVersion { found }
            }
            _ => Invalid::Json {
                detail: err.to_string(),
            },
        }
    })?;
    raw.into_position()
}

impl WireIn<'_> {
    /// Checks the version and the required fields, then validates the position.
    fn into_position(self) -> Result<Position, Invalid> {
        match self.v {
            None => return Err(Invalid::MissingField { field: "v" }),
            Some(WIRE_VERSION) => {}
            Some(found) => return Err(Invalid::UnsupportedVersion { found }),
        }
        let device_id = self
            .device_id
            .ok_or(Invalid::MissingField { field: "deviceId" })?;
        let seq = self.seq.ok_or(Invalid::MissingField { field: "seq" })?;
        let ts = self.ts.ok_or(Invalid::MissingField { field: "ts" })?;
        let ts = time::parse_rfc3339(&ts)?;
        let lat = self.lat.ok_or(Invalid::MissingField { field: "lat" })?;
        let lon = self.lon.ok_or(Invalid::MissingField { field: "lon" })?;
        let battery_pct = match self.battery_pct {
            None => None,
            Some(pct) => Some(
                u8::try_from(pct)
                    .ok()
                    .filter(|p| *p <= 100)
                    .ok_or(Invalid::Battery { value: pct })?,
            ),
        };
        let position = Position {
            device_id: device_id.into_owned(),
            seq,
            ts,
            lat,
            lon,
            alt_m: self.alt_m,
            heading_deg: self.heading_deg,
            speed_mps: self.speed_mps,
            battery_pct,
            gnss: Gnss {
                fix: self.fix.as_deref().and_then(FixType::from_wire),
                sats: satellites("sats", self.sats)?,
                sats_visible: satellites("satsVisible", self.sats_visible)?,
                h_acc_m: self.h_acc_m,
            },
        };
        position.validate()?;
        Ok(position)
    }
}

/// A satellite count as read: at most 255.
fn satellites(field: &'static str, value: Option<u64>) -> Result<Option<u8>, Invalid> {
    value
        .map(|value| u8::try_from(value).map_err(|_| Invalid::Satellites { field, value }))
        .transpose()
}

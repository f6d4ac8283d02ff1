//! The batch message, version 2: several positions of one drone in one message, for a
//! drone that publishes less often than it samples (the agent's `PUBLISH_EVERY`).
//!
//! ```json
//! {"v":2,"deviceId":"drone-0042","positions":[
//!   {"v":1,"deviceId":"drone-0042","seq":1834,"ts":"2026-11-22T09:15:02.500Z","lat":47.6205,"lon":-122.3493},
//!   {"v":1,"deviceId":"drone-0042","seq":1835,"ts":"2026-11-22T09:15:07.500Z","lat":47.6206,"lon":-122.3491}]}
//! ```
//!
//! Each element of `positions` is a whole version 1 message as [`Position::encode`] writes
//! it, so a drone builds a batch from the messages it already buffered without decoding
//! them, and a reader judges each element on its own ([`super::decode`]): one bad element
//! is refused alone. A reader of version 1 only refuses a batch, as
//! [`Invalid::UnsupportedVersion`] with `found: 2`; it cannot misread it as a position.
//!
//! Owns the batch's layout, its size bound ([`BATCH_MAX_BYTES`]), the builder the agent
//! fills ([`BatchBuilder`]) and the reader of both versions ([`decode_message`]).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Invalid, MAX_MESSAGE_BYTES, Position};

/// The `v` of a batch.
pub const BATCH_VERSION: u64 = 2;

/// The largest batch written, in bytes. IoT Hub meters device-to-cloud messages in 4 KB
/// chunks, properties included ("IoT Hub quotas and throttling"); 512 bytes are left for
/// the properties the topic carries (content type, encoding, creation time) and those the
/// hub adds, so that a batch is metered as one message.
pub const BATCH_MAX_BYTES: usize = 4096 - 512;

/// A message as read: one position (version 1) or a batch (version 2).
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A version 1 message.
    One(Position),
    /// A version 2 message.
    Batch(Batch),
}

/// A batch as read: the drone it names, and each element's own verdict, in message order.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The `deviceId` of the batch (each position names its own too).
    pub device_id: String,
    /// Each element, decoded and validated alone.
    pub positions: Vec<Result<Position, Invalid>>,
}

/// Reads a message of either version. A version 1 message costs what [`super::decode`]
/// costs; only a batch is parsed twice (its version, then its elements).
pub fn decode_message(bytes: &[u8]) -> Result<Decoded, Invalid> {
    match super::decode(bytes) {
        Ok(position) => Ok(Decoded::One(position)),
        Err(Invalid::UnsupportedVersion {
            found: BATCH_VERSION,
        }) => decode_batch(bytes).map(Decoded::Batch),
        Err(err) => Err(err),
    }
}

/// The batch as read, every field optional so that absence gets its own reason.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchIn<'a> {
    #[serde(borrow)]
    device_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    positions: Option<Vec<&'a RawValue>>,
}

fn decode_batch(bytes: &[u8]) -> Result<Batch, Invalid> {
    let json = |detail: String| Invalid::Json { detail };
    let text = std::str::from_utf8(bytes).map_err(|err| json(format!("not UTF-8: {err}")))?;
    let raw: BatchIn<'_> = serde_json::from_str(text).map_err(|err| json(err.to_string()))?;
    let device_id = raw
        .device_id
        .ok_or(Invalid::MissingField { field: "deviceId" })?;
    super::check_device_id(&device_id)?;
    let elements = raw
        .positions
        .ok_or(Invalid::MissingField { field: "positions" })?;
    if elements.is_empty() {
        return Err(json("a batch holds no positions".to_owned()));
    }
    Ok(Batch {
        device_id: device_id.into_owned(),
        positions: elements
            .iter()
            .map(|element| super::decode(element.get().as_bytes()))
            .collect(),
    })
}

/// Builds a batch from version 1 messages, within [`BATCH_MAX_BYTES`].
#[derive(Debug)]
pub struct BatchBuilder {
    out: Vec<u8>,
    count: usize,
}

impl BatchBuilder {
    /// An empty batch of `device_id` (a valid device id: it needs no JSON escape).
    pub fn new(device_id: &str) -> BatchBuilder {
        let mut out = Vec::with_capacity(BATCH_MAX_BYTES);
        out.extend_from_slice(br#"{"v":2,"deviceId":""#);
        out.extend_from_slice(device_id.as_bytes());
        out.extend_from_slice(br#"","positions":["#);
        BatchBuilder { out, count: 0 }
    }

    /// Whether `message` still fits within [`BATCH_MAX_BYTES`].
    pub fn fits(&self, message: &[u8]) -> bool {
        message.len() <= self.room()
    }

    /// The longest message that still fits (with its separator and the closing `]}`).
    pub fn room(&self) -> usize {
        BATCH_MAX_BYTES.saturating_sub(self.out.len() + usize::from(self.count > 0) + 2)
    }

    /// Appends `message`, a version 1 message as [`Position::encode`] wrote it. The caller
    /// checks [`BatchBuilder::fits`] first; a message of a full batch is still appended,
    /// up to IoT Hub's message limit, so that no position is ever left out.
    pub fn push(&mut self, message: &[u8]) {
        debug_assert!(self.out.len() + message.len() < MAX_MESSAGE_BYTES);
        if self.count > 0 {
            self.out.push(b',');
        }
        self.out.extend_from_slice(message);
        self.count += 1;
    }

    /// How many positions the batch holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the batch holds no position.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The message.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(b"]}");
        self.out
    }
}

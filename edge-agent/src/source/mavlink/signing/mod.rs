//! MAVLink 2 message signing (mavlink.io "Message Signing"), with the key of
//! `MAVLINK_SIGNING_KEY_FILE`: which frames are the vehicle's, and the agent's own
//! signatures. A pure state machine, no I/O; the clock is passed in.
//!
//! - A frame is accepted only if it is signed, its 48-bit signature (the first 6 bytes of
//!   SHA-256 over key, header, payload, checksum, link id and timestamp) matches, its
//!   timestamp is newer than the last accepted one of its stream (link id, system id,
//!   component id), and it is not more than one minute behind the newest timestamp the
//!   agent knows (the board clock, its own signatures, accepted frames). Otherwise it is
//!   [`Refused`], by reason. MAVLink 1 frames cannot be signed: they are unsigned.
//!   Messages outside the common set are not checked: they are ignored anyway.
//! - The agent signs on link id 0 with a timestamp in 10 µs units since
//!   2015-01-01 00:00:00 UTC, the board clock's, but always after the newest timestamp
//!   it knows: a clock that steps back never makes a timestamp repeat, and a board clock
//!   still at 1970 signs after the vehicle's own timestamps.
//!
//! The signature is computed here with `sha2`, not with the `mavlink` crate's
//! `mav2-message-signing` feature: in 0.19 that feature brings a second major version of
//! the SHA-2 stack (sha2 0.11 and six more crates) for one hash, and its `SigningData`
//! does not fit either: it answers a bare yes or no (the agent counts refusals by reason),
//! reads the system clock itself (these rules are tested on a clock of their own), and
//! checks only new streams against the newest timestamp. The crate still lays out the
//! frame to sign (`serialize_message_for_signing`); pymavlink checks both directions in
//! `tests/mavlink.rs`.

use std::collections::HashMap;
use std::fmt;

use chrono::{DateTime, Utc};
use mavlink::dialects::common::MavMessage;
use mavlink::{MAVLinkV2MessageRaw, MavHeader};
use settings::SecretBytes;
use sha2::{Digest, Sha256};

use super::frames::Frame;
use crate::status::RefusedFrames;

/// The signature block: link id (1 byte), timestamp (6), signature (6).
const SIGNATURE_BLOCK: usize = 13;
const SIGNATURE_LEN: usize = 6;
/// The link id of the agent's own signatures.
const LINK_ID: u8 = 0;
/// One minute in timestamp units (10 µs).
const ONE_MINUTE: u64 = 6_000_000;
/// The largest 48-bit timestamp.
const TIMESTAMP_MAX: u64 = (1 << 48) - 1;
/// 2015-01-01 00:00:00 UTC, the signing epoch, in UNIX seconds.
const EPOCH_UNIX_SECONDS: i64 = 1_420_070_400;

/// The 32-byte secret key; `Debug` prints `<redacted>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningKey(SecretBytes);

/// Why a key file's text is not a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0}: write the 32-byte key as 64 hexadecimal digits on one line (e.g. `openssl rand -hex 32`)"
)]
pub struct KeyError(String);

impl SigningKey {
    /// The key written as 64 hexadecimal digits (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<SigningKey, KeyError> {
        let text = text.trim();
        if text.len() != 64 {
            return Err(KeyError(format!(
                "the key has {} characters, not 64",
                text.chars().count()
            )));
        }
        let bytes = (0..32)
            .map(|i| {
                text.get(2 * i..2 * i + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                    .ok_or_else(|| KeyError("the key is not hexadecimal".to_owned()))
            })
            .collect::<Result<Vec<u8>, KeyError>>()?;
        Ok(SigningKey(SecretBytes::new(bytes)))
    }

    fn expose(&self) -> &[u8] {
        self.0.expose()
    }
}

/// Why a frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// Not signed (MAVLink 1, or MAVLink 2 without the signed flag).
    Unsigned,
    /// Signed, but not with the key.
    BadSignature,
    /// Signed with the key, but replayed or old: not newer than its stream's last
    /// timestamp, or more than a minute behind the newest one known.
    OldTimestamp,
}

impl Refused {
    /// Counts this refusal in the status.
    pub(super) fn count(self, refused: &mut RefusedFrames) -> u64 {
        let counter = match self {
            Refused::Unsigned => &mut refused.unsigned,
            Refused::BadSignature => &mut refused.bad_signature,
            Refused::OldTimestamp => &mut refused.old_timestamp,
        };
        *counter += 1;
        *counter
    }

    /// The status field that counts it.
    pub(super) fn field(self) -> &'static str {
        match self {
            Refused::Unsigned => "mavlink.refused.unsigned",
            Refused::BadSignature => "mavlink.refused.bad_signature",
            Refused::OldTimestamp => "mavlink.refused.old_timestamp",
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refused::Unsigned => "an unsigned MAVLink frame",
            Refused::BadSignature => {
                "a MAVLink frame not signed with MAVLINK_SIGNING_KEY_FILE's key"
            }
            Refused::OldTimestamp => {
                "a signed MAVLink frame with an old signing timestamp (a replay?)"
            }
        })
    }
}

/// The signing state of one link: the key, each stream's last timestamp, and the newest
/// timestamp known.
#[derive(Debug)]
pub(super) struct Signing {
    key: SigningKey,
    /// (link id, system id, component id) -> the timestamp of its last accepted frame.
    streams: HashMap<(u8, u8, u8), u64>,
    /// The newest timestamp signed or accepted.
    newest: u64,
}

impl Signing {
    pub(super) fn new(key: SigningKey) -> Signing {
        Signing {
            key,
            streams: HashMap::new(),
            newest: 0,
        }
    }

    /// Accepts `frame` or says why not; `now` is the board clock.
    pub(super) fn check(&mut self, frame: &Frame, now: DateTime<Utc>) -> Result<(), Refused> {
        let Some(signed) = &frame.signed else {
            return Err(Refused::Unsigned);
        };
        if signature(&self.key, &signed.covered) != signed.signature {
            return Err(Refused::BadSignature);
        }
        let timestamp = signed.timestamp();
        let stream = (signed.link_id(), frame.system_id, frame.component_id);
        if self
            .streams
            .get(&stream)
            .is_some_and(|last| timestamp <= *last)
        {
            return Err(Refused::OldTimestamp);
        }
        let newest = self.newest.max(timestamp_at(now));
        if timestamp.saturating_add(ONE_MINUTE) < newest {
            return Err(Refused::OldTimestamp);
        }
        self.streams.insert(stream, timestamp);
        self.newest = self.newest.max(timestamp);
        Ok(())
    }

    /// `message` as a signed MAVLink 2 frame; `now` is the board clock.
    pub(super) fn sign(
        &mut self,
        header: MavHeader,
        message: &MavMessage,
        now: DateTime<Utc>,
    ) -> Vec<u8> {
        let timestamp = timestamp_at(now).max(self.newest + 1).min(TIMESTAMP_MAX);
        self.newest = timestamp;
        // The frame with the signed flag, its checksum over it, and a zeroed signature
        // block at its end.
        let mut raw = MAVLinkV2MessageRaw::new();
        raw.serialize_message_for_signing(header, message);
        let mut frame = raw.raw_bytes().to_vec();
        let block = frame.len() - SIGNATURE_BLOCK;
        frame[block] = LINK_ID;
        frame[block + 1..block + 7].copy_from_slice(&timestamp.to_le_bytes()[..6]);
        let signed = frame.len() - SIGNATURE_LEN;
        let value = signature(&self.key, &frame[..signed]);
        frame[signed..].copy_from_slice(&value);
        frame
    }
}

/// The 48-bit signature of `covered` (a frame up to its signing timestamp's end): the
/// first 6 bytes of SHA-256 over the key and `covered`.
fn signature(key: &SigningKey, covered: &[u8]) -> [u8; SIGNATURE_LEN] {
    let digest = Sha256::new()
        .chain_update(key.expose())
        .chain_update(covered)
        .finalize();
    digest[..SIGNATURE_LEN].try_into().expect("6 bytes")
}

/// The signing timestamp at `at`: 10 µs units since 2015-01-01 00:00:00 UTC (0 before).
fn timestamp_at(at: DateTime<Utc>) -> u64 {
    let since = at.timestamp_micros() - EPOCH_UNIX_SECONDS * 1_000_000;
    u64::try_from(since / 10).unwrap_or(0).min(TIMESTAMP_MAX)
}

#[cfg(test)]
mod tests;

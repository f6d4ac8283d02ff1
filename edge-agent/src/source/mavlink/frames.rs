//! MAVLink framing: finds MAVLink 1 (`0xFE`) and MAVLink 2 (`0xFD`, signed or not)
//! frames in a byte stream, checks their checksums, and tells good frames, frames of
//! messages outside the common set, and unreadable bytes apart. The `mavlink` crate's
//! readers skip bad bytes and unknown messages without a word; the agent counts them, so
//! a link that only half works shows it.
//!
//! Layouts (mavlink.io "Packet serialization"): v1 is `STX len seq sys comp msgid
//! payload crc16`; v2 is `STX len incompat compat seq sys comp msgid[3] payload crc16
//! [signature 13]`, the signature present when incompat flag `0x01` is set. The checksum
//! covers everything after STX up to the payload's end, then the message's CRC_EXTRA.

use mavlink::dialects::common::MavMessage;
use mavlink::error::ParserError;
use mavlink::{MavlinkVersion, Message};

const STX_V1: u8 = 0xFE;
const STX_V2: u8 = 0xFD;
const HEADER_V1: usize = 6;
const HEADER_V2: usize = 10;
const SIGNATURE_LEN: usize = 13;
/// The signature's own bytes, at the end of the signature block.
const SIGNATURE_VALUE_LEN: usize = 6;
/// The only incompatibility flag defined: the frame is signed.
const INCOMPAT_SIGNED: u8 = 0x01;

/// A good frame.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Frame {
    pub(super) version: MavlinkVersion,
    pub(super) system_id: u8,
    pub(super) component_id: u8,
    pub(super) message: MavMessage,
    /// The signature block and the bytes it signs, when the frame is signed.
    pub(super) signed: Option<Signed>,
}

/// A signed MAVLink 2 frame's bytes (mavlink.io "Message Signing"): the 13-byte signature
/// block is a link id, a 48-bit timestamp and a 48-bit signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Signed {
    /// What the signature covers: the frame from its start marker to the timestamp's end.
    pub(super) covered: Vec<u8>,
    /// The signature: the first 6 bytes of SHA-256 over the key and `covered`.
    pub(super) signature: [u8; SIGNATURE_VALUE_LEN],
}

impl Signed {
    fn new(frame: &[u8]) -> Signed {
        let (covered, signature) = frame.split_at(frame.len() - SIGNATURE_VALUE_LEN);
        Signed {
            covered: covered.to_vec(),
            signature: signature.try_into().expect("6 bytes"),
        }
    }

    /// The link id the sender signed on.
    pub(super) fn link_id(&self) -> u8 {
        self.covered[self.covered.len() - 7]
    }

    /// The signing timestamp: 10 µs units since 2015-01-01 00:00:00 UTC.
    pub(super) fn timestamp(&self) -> u64 {
        let mut bytes = [0; 8];
        bytes[..6].copy_from_slice(&self.covered[self.covered.len() - 6..]);
        u64::from_le_bytes(bytes)
    }
}

/// What the next bytes of the stream are.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Decoded {
    /// A frame whose checksum holds (boxed: a message is up to 288 bytes).
    Frame(Box<Frame>),
    /// A well-formed frame of a message outside the common set (its checksum cannot be
    /// checked without the message's CRC_EXTRA).
    Unknown { message_id: u32 },
    /// Bytes that are not a frame.
    Unreadable(Unreadable),
}

/// Why bytes could not be read as a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unreadable {
    /// Bytes before the next start marker.
    StrayBytes(usize),
    /// A frame whose checksum does not hold.
    BadChecksum { message_id: u32 },
    /// A MAVLink 2 frame with incompatibility flags this reader does not know.
    UnknownFlags(u8),
    /// A frame whose checksum holds but whose payload is not the message it names.
    BadPayload { message_id: u32 },
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::StrayBytes(n) => write!(f, "{n} bytes that are not a MAVLink frame"),
            Unreadable::BadChecksum { message_id } => {
                write!(f, "a frame of message {message_id} with a wrong checksum")
            }
            Unreadable::UnknownFlags(flags) => {
                write!(
                    f,
                    "a MAVLink 2 frame with unknown incompatibility flags {flags:#04x}"
                )
            }
            Unreadable::BadPayload { message_id } => {
                write!(
                    f,
                    "a frame of message {message_id} whose payload does not parse"
                )
            }
        }
    }
}

/// Cuts a byte stream into frames.
#[derive(Debug, Default)]
pub(super) struct Decoder {
    pending: Vec<u8>,
}

impl Decoder {
    /// Adds bytes read from the link.
    pub(super) fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The next frame or unreadable stretch, or `None` until more bytes arrive.
    pub(super) fn next(&mut self) -> Option<Decoded> {
        let start = self
            .pending
            .iter()
            .position(|b| matches!(*b, STX_V1 | STX_V2));
        match start {
            None if self.pending.is_empty() => return None,
            None => {
                let stray = self.pending.len();
                self.pending.clear();
                return Some(Decoded::Unreadable(Unreadable::StrayBytes(stray)));
            }
            Some(0) => {}
            Some(stray) => {
                self.pending.drain(..stray);
                return Some(Decoded::Unreadable(Unreadable::StrayBytes(stray)));
            }
        }
        let (version, header) = match self.pending[0] {
            STX_V1 => (MavlinkVersion::V1, HEADER_V1),
            _ => (MavlinkVersion::V2, HEADER_V2),
        };
        if self.pending.len() < header {
            return None;
        }
        let payload_len = usize::from(self.pending[1]);
        let mut signature = 0;
        if version == MavlinkVersion::V2 {
            let flags = self.pending[2];
            if flags & !INCOMPAT_SIGNED != 0 {
                // The frame's length cannot be known: resynchronise after the marker.
                self.pending.drain(..1);
                return Some(Decoded::Unreadable(Unreadable::UnknownFlags(flags)));
            }
            if flags & INCOMPAT_SIGNED != 0 {
                signature = SIGNATURE_LEN;
            }
        }
        let crc_at = header + payload_len;
        let total = crc_at + 2 + signature;
        if self.pending.len() < total {
            return None;
        }
        let bytes = &self.pending[..total];
        let (system_id, component_id, message_id) = match version {
            MavlinkVersion::V1 => (bytes[3], bytes[4], u32::from(bytes[5])),
            MavlinkVersion::V2 => (
                bytes[5],
                bytes[6],
                u32::from_le_bytes([bytes[7], bytes[8], bytes[9], 0]),
            ),
        };
        let payload = &bytes[header..crc_at];
        let decoded = match MavMessage::parse(version, message_id, payload) {
            Err(ParserError::UnknownMessage { .. }) => Decoded::Unknown { message_id },
            parsed => {
                let crc = u16::from_le_bytes([bytes[crc_at], bytes[crc_at + 1]]);
                let extra = MavMessage::extra_crc(message_id);
                if mavlink::calculate_crc(&bytes[1..crc_at], extra) != crc {
                    // Possibly a marker byte inside other data: resynchronise after it.
                    self.pending.drain(..1);
                    return Some(Decoded::Unreadable(Unreadable::BadChecksum { message_id }));
                }
                match parsed {
                    Ok(message) => Decoded::Frame(Box::new(Frame {
                        version,
                        system_id,
                        component_id,
                        message,
                        signed: (signature != 0).then(|| Signed::new(bytes)),
                    })),
                    Err(_) => Decoded::Unreadable(Unreadable::BadPayload { message_id }),
                }
            }
        };
        self.pending.drain(..total);
        Some(decoded)
    }
}

/// Encodes `message` from `system_id`/`component_id` as one unsigned frame of `version`.
pub(super) fn encode(
    version: MavlinkVersion,
    sequence: u8,
    system_id: u8,
    component_id: u8,
    message: &MavMessage,
) -> Vec<u8> {
    let header = mavlink::MavHeader {
        system_id,
        component_id,
        sequence,
    };
    let mut bytes = Vec::with_capacity(64);
    mavlink::write_versioned_msg(&mut bytes, version, header, message)
        .expect("writing to a Vec cannot fail");
    bytes
}

#[cfg(test)]
mod tests {
    use mavlink::dialects::common::{GLOBAL_POSITION_INT_DATA, SYSTEM_TIME_DATA};

    use super::*;

    fn position() -> MavMessage {
        MavMessage::GLOBAL_POSITION_INT(GLOBAL_POSITION_INT_DATA {
            time_boot_ms: 1234,
            lat: 476_205_000,
            lon: -1_223_493_000,
            alt: 121_500,
            relative_alt: 100_000,
            vx: 300,
            vy: 400,
            vz: 0,
            hdg: 27_000,
        })
    }

    fn decode_all(bytes: &[u8]) -> Vec<Decoded> {
        let mut decoder = Decoder::default();
        decoder.push(bytes);
        std::iter::from_fn(|| decoder.next()).collect()
    }

    #[test]
    fn reads_v1_and_v2_frames_in_one_stream() {
        let mut stream = encode(MavlinkVersion::V1, 0, 1, 1, &position());
        stream.extend(encode(MavlinkVersion::V2, 1, 2, 1, &position()));
        let decoded = decode_all(&stream);
        assert_eq!(decoded.len(), 2);
        let Decoded::Frame(v1) = &decoded[0] else {
            panic!("{decoded:?}")
        };
        assert_eq!((v1.version, v1.system_id), (MavlinkVersion::V1, 1));
        assert_eq!(v1.message, position());
        let Decoded::Frame(v2) = &decoded[1] else {
            panic!("{decoded:?}")
        };
        assert_eq!((v2.version, v2.system_id), (MavlinkVersion::V2, 2));
        assert_eq!(v2.message, position());
    }

    #[test]
    fn frames_split_across_reads_wait_for_their_end() {
        let frame = encode(MavlinkVersion::V2, 0, 1, 1, &position());
        let mut decoder = Decoder::default();
        decoder.push(&frame[..7]);
        assert_eq!(decoder.next(), None);
        decoder.push(&frame[7..]);
        assert!(matches!(decoder.next(), Some(Decoded::Frame(_))));
        assert_eq!(decoder.next(), None);
    }

    #[test]
    fn a_signed_frame_is_read_past_its_signature() {
        let mut frame = encode(MavlinkVersion::V2, 0, 1, 1, &position());
        // Mark it signed (the flag is in the checksummed header, so the checksum is
        // computed again) and append a signature: link id, timestamp, signature.
        frame[2] |= INCOMPAT_SIGNED;
        let crc_at = frame.len() - 2;
        let crc = mavlink::calculate_crc(&frame[1..crc_at], MavMessage::extra_crc(33));
        frame[crc_at..].copy_from_slice(&crc.to_le_bytes());
        frame.extend([7u8; SIGNATURE_LEN]);
        frame.extend(encode(MavlinkVersion::V2, 1, 1, 1, &position()));
        let decoded = decode_all(&frame);
        assert!(
            decoded.iter().all(|d| matches!(d, Decoded::Frame(_))),
            "{decoded:?}"
        );
        assert_eq!(decoded.len(), 2);
    }

    #[test]
    fn garbage_and_bad_checksums_are_unreadable_and_good_frames_survive() {
        let mut stream = vec![0x00, 0x42, 0x13];
        let mut broken = encode(MavlinkVersion::V2, 0, 1, 1, &position());
        let last = broken.len() - 1;
        broken[last] ^= 0xFF;
        stream.extend(&broken);
        stream.extend(encode(
            MavlinkVersion::V1,
            1,
            1,
            1,
            &MavMessage::SYSTEM_TIME(SYSTEM_TIME_DATA {
                time_unix_usec: 1_764_000_000_000_000,
                time_boot_ms: 5000,
            }),
        ));
        let decoded = decode_all(&stream);
        assert_eq!(
            decoded[0],
            Decoded::Unreadable(Unreadable::StrayBytes(3)),
            "{decoded:?}"
        );
        assert_eq!(
            decoded[1],
            Decoded::Unreadable(Unreadable::BadChecksum { message_id: 33 })
        );
        assert!(
            matches!(decoded.last(), Some(Decoded::Frame(f)) if matches!(f.message, MavMessage::SYSTEM_TIME(_))),
            "{decoded:?}"
        );
    }

    #[test]
    fn a_message_outside_the_common_set_is_unknown_not_unreadable() {
        // ArduPilot's AHRS (id 163, ardupilotmega dialect), its checksum made up.
        let mut frame = vec![STX_V2, 2, 0, 0, 0, 1, 1, 163, 0, 0, 0xAA, 0xBB, 0x01, 0x02];
        frame.extend(encode(MavlinkVersion::V2, 1, 1, 1, &position()));
        let decoded = decode_all(&frame);
        assert_eq!(decoded[0], Decoded::Unknown { message_id: 163 });
        assert!(matches!(decoded[1], Decoded::Frame(_)));
    }
}

//! The continuation of a track: where the next page starts, as an opaque token.
//!
//! A token carries the span of the first page (so that `since=1h` means the same hour on
//! every page) and the order key of the last position answered. It is base64url of those
//! 33 bytes and an 8-byte SHA-256 tag over them and the drone's id: a token that is cut,
//! edited or given for another drone is refused. The tag is a check, not a secret: a made-up
//! token gains nothing, as its span is held to `TRACK_MAX_SPAN` like any other.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use telemetry::PositionOrder;

use super::Span;

/// The token's format version.
const VERSION: u8 = 1;
/// Version, since, until, device time, seq.
const BODY: usize = 1 + 8 + 8 + 8 + 8;
/// Bytes of the tag.
const TAG: usize = 8;

/// Where the next page of a track starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Continuation {
    /// The span every page of this track reads.
    pub span: Span,
    /// The last position answered; the next page starts after it.
    pub after: PositionOrder,
}

fn tag(device_id: &str, body: &[u8]) -> [u8; TAG] {
    let digest = Sha256::new()
        .chain_update(b"fleet-api track continuation\0")
        .chain_update(device_id.as_bytes())
        .chain_update([0])
        .chain_update(body)
        .finalize();
    digest[..TAG]
        .try_into()
        .expect("a digest is longer than the tag")
}

impl Continuation {
    /// The token of this continuation of `device_id`'s track.
    pub fn encode(&self, device_id: &str) -> String {
        let mut bytes = Vec::with_capacity(BODY + TAG);
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.span.since_ms.to_be_bytes());
        bytes.extend_from_slice(&self.span.until_ms.to_be_bytes());
        bytes.extend_from_slice(&self.after.device_time_ms.to_be_bytes());
        bytes.extend_from_slice(&self.after.seq.to_be_bytes());
        let tag = tag(device_id, &bytes);
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The continuation `token` of `device_id`'s track, if this API gave it.
    pub fn decode(device_id: &str, token: &str) -> Option<Continuation> {
        let bytes = URL_SAFE_NO_PAD.decode(token.trim()).ok()?;
        if bytes.len() != BODY + TAG || bytes[0] != VERSION {
            return None;
        }
        let (body, given) = bytes.split_at(BODY);
        if tag(device_id, body) != given {
            return None;
        }
        let word = |at: usize| -> [u8; 8] { body[at..at + 8].try_into().expect("8 bytes") };
        let continuation = Continuation {
            span: Span {
                since_ms: i64::from_be_bytes(word(1)),
                until_ms: i64::from_be_bytes(word(9)),
            },
            after: PositionOrder {
                device_time_ms: i64::from_be_bytes(word(17)),
                seq: u64::from_be_bytes(word(25)),
            },
        };
        let span = continuation.span;
        let inside = (span.since_ms..span.until_ms).contains(&continuation.after.device_time_ms);
        inside.then_some(continuation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Continuation {
        Continuation {
            span: Span {
                since_ms: 1_795_335_300_000,
                until_ms: 1_795_338_900_000,
            },
            after: PositionOrder {
                device_time_ms: 1_795_336_000_500,
                seq: 1834,
            },
        }
    }

    #[test]
    fn a_token_reads_back_for_its_drone_only() {
        let token = sample().encode("drone-1");
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(Continuation::decode("drone-1", &token), Some(sample()));
        assert_eq!(Continuation::decode("drone-2", &token), None);
    }

    #[test]
    fn a_cut_or_edited_token_is_refused() {
        let token = sample().encode("drone-1");
        assert_eq!(
            Continuation::decode("drone-1", &token[..token.len() - 1]),
            None
        );
        assert_eq!(Continuation::decode("drone-1", "not a token"), None);
        assert_eq!(Continuation::decode("drone-1", ""), None);
        for at in 0..token.len() {
            let mut edited = token.clone().into_bytes();
            edited[at] = if edited[at] == b'A' { b'B' } else { b'A' };
            let edited = String::from_utf8(edited).unwrap();
            assert_eq!(Continuation::decode("drone-1", &edited), None, "{edited}");
        }
    }

    #[test]
    fn a_token_whose_position_lies_outside_its_span_is_refused() {
        let mut outside = sample();
        outside.after.device_time_ms = outside.span.until_ms;
        assert_eq!(Continuation::decode("d", &outside.encode("d")), None);
    }
}

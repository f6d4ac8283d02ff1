//! The order of the positions of one drone, on which every "newest wins" decision rests.
//!
//! Positions are ordered by device time (milliseconds since the Unix epoch), then by the
//! device's sequence number. Comparing a candidate with what is stored goes through
//! [`PositionOrder`] alone, in memory ([`PositionOrder::is_newer_than`]) and on the server
//! (the document carries `deviceTimeMs` and `seq`;
//! [`PositionOrder::stored_is_older_condition`]).

use chrono::{DateTime, Utc};

/// Where a position stands among the positions of its drone. `Ord` compares device time
/// first, then `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PositionOrder {
    /// Device time in milliseconds since the Unix epoch.
    pub device_time_ms: i64,
    /// The device's sequence number.
    pub seq: u64,
}

impl PositionOrder {
    /// The order key of a position taken at `device_time` with sequence number `seq`.
    pub fn of(device_time: DateTime<Utc>, seq: u64) -> Self {
        PositionOrder {
            device_time_ms: device_time.timestamp_millis(),
            seq,
        }
    }

    /// Whether `self` should replace `current`: strictly newer. An equal key (a replay of
    /// the same position) does not replace.
    pub fn is_newer_than(self, current: PositionOrder) -> bool {
        self > current
    }

    /// A Cosmos DB SQL filter, for the `condition` of a conditional patch or a query, that
    /// holds when the stored document `c` is older than this position, or holds no position
    /// (a document the drone's agent facts created before its first position).
    pub fn stored_is_older_condition(self) -> String {
        let mut out = Vec::with_capacity(96);
        self.write_stored_is_older_condition(&mut out);
        String::from_utf8(out).expect("the condition is ASCII")
    }

    /// Appends [`PositionOrder::stored_is_older_condition`] to `out`. It holds no character
    /// that JSON escapes, so it can be written between quotes as it is.
    pub fn write_stored_is_older_condition(self, out: &mut Vec<u8>) {
        let PositionOrder {
            device_time_ms: t,
            seq,
        } = self;
        let mut t_buf = itoa::Buffer::new();
        let t = t_buf.format(t).as_bytes();
        out.extend_from_slice(b"FROM c WHERE NOT IS_DEFINED(c.deviceTimeMs) OR c.deviceTimeMs < ");
        out.extend_from_slice(t);
        out.extend_from_slice(b" OR (c.deviceTimeMs = ");
        out.extend_from_slice(t);
        out.extend_from_slice(b" AND c.seq < ");
        out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
        out.push(b')');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(device_time_ms: i64, seq: u64) -> PositionOrder {
        PositionOrder {
            device_time_ms,
            seq,
        }
    }

    #[test]
    fn time_first_then_seq() {
        assert!(key(1_000, 1) > key(999, 50));
        assert!(key(1_000, 2) > key(1_000, 1));
        assert!(key(-5, 9) < key(0, 0));
    }

    #[test]
    fn is_newer_than_needs_strictly_greater() {
        assert!(key(2, 0).is_newer_than(key(1, 9)));
        assert!(key(1, 2).is_newer_than(key(1, 1)));
        assert!(!key(1, 1).is_newer_than(key(1, 1)));
        assert!(!key(1, 0).is_newer_than(key(1, 1)));
    }

    #[test]
    fn of_uses_millis() {
        let t = DateTime::parse_from_rfc3339("1970-01-01T00:00:01.234Z")
            .unwrap()
            .to_utc();
        assert_eq!(PositionOrder::of(t, 7), key(1_234, 7));
    }

    #[test]
    fn condition_names_document_fields() {
        assert_eq!(
            key(1_234, 7).stored_is_older_condition(),
            "FROM c WHERE NOT IS_DEFINED(c.deviceTimeMs) OR c.deviceTimeMs < 1234 OR (c.deviceTimeMs = 1234 AND c.seq < 7)"
        );
    }
}

//! The on-disk record format of the buffer and the scanner that reads a segment,
//! skipping corrupt regions.
//!
//! A record, little-endian:
//! ```text
//! magic "EAR1" (4) | crc32 (4) | payload length (4) | id (8) | created, Unix ms (8) | payload
//! ```
//! The CRC-32 (IEEE) covers everything after itself: length, id, time and payload. A
//! record whose magic, length or checksum is wrong starts a corrupt region; the scanner
//! looks for the next magic and carries on, so one bad record does not hide the rest.

use telemetry::wire::MAX_MESSAGE_BYTES;

/// Marks the start of every record.
pub const MAGIC: [u8; 4] = *b"EAR1";
/// Bytes before the payload.
pub const HEADER_LEN: usize = 28;

/// One buffered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record id, which is also the message's `seq`.
    pub id: u64,
    /// When the message was made, Unix milliseconds (the IoT Hub creation time).
    pub created_ms: i64,
    /// The encoded message.
    pub payload: Vec<u8>,
}

impl Record {
    /// The record's size on disk.
    pub fn disk_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// Appends the record's bytes to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[0; 4]);
        let len = u32::try_from(self.payload.len()).expect("payloads are at most 256 KiB");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.created_ms.to_le_bytes());
        out.extend_from_slice(&self.payload);
        let crc = crc32fast::hash(&out[start + 8..]);
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }
}

/// What sits at one offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A valid record and its size on disk.
    Record(Record, usize),
    /// Not a valid record (bad magic, length or checksum, or cut short).
    Corrupt,
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().expect("4 bytes"))
}

fn le_u64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
}

/// Decodes the record at the start of `bytes`.
pub fn decode(bytes: &[u8]) -> Decoded {
    if bytes.len() < HEADER_LEN || bytes[..4] != MAGIC {
        return Decoded::Corrupt;
    }
    let crc = le_u32(&bytes[4..8]);
    let len = le_u32(&bytes[8..12]) as usize;
    if len > MAX_MESSAGE_BYTES || bytes.len() < HEADER_LEN + len {
        return Decoded::Corrupt;
    }
    let end = HEADER_LEN + len;
    if crc32fast::hash(&bytes[8..end]) != crc {
        return Decoded::Corrupt;
    }
    let record = Record {
        id: le_u64(&bytes[12..20]),
        created_ms: le_u64(&bytes[20..28]) as i64,
        payload: bytes[HEADER_LEN..end].to_vec(),
    };
    Decoded::Record(record, end)
}

/// The payload length a record header at the start of `bytes` announces, if the header
/// is complete (used to read exactly one record from disk).
pub fn announced_len(header: &[u8]) -> Option<usize> {
    (header.len() >= HEADER_LEN && header[..4] == MAGIC)
        .then(|| HEADER_LEN + le_u32(&header[8..12]) as usize)
}

/// The result of scanning a whole segment.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// The valid records with their offsets.
    pub records: Vec<(u64, Record)>,
    /// The offsets where corrupt regions start.
    pub corrupt_at: Vec<u64>,
}

/// Reads every valid record of a segment; each corrupt region is skipped up to the next
/// magic and reported once.
pub fn scan(bytes: &[u8]) -> Scan {
    let mut scan = Scan::default();
    let mut pos = 0;
    while pos < bytes.len() {
        match decode(&bytes[pos..]) {
            Decoded::Record(record, len) => {
                scan.records.push((pos as u64, record));
                pos += len;
            }
            Decoded::Corrupt => {
                scan.corrupt_at.push(pos as u64);
                pos = find_magic(bytes, pos + 1).unwrap_or(bytes.len());
            }
        }
    }
    scan
}

fn find_magic(bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(MAGIC.len())
        .position(|window| window == MAGIC)
        .map(|index| from + index)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn record(id: u64, payload: &[u8]) -> Record {
        Record {
            id,
            created_ms: 1_700_000_000_000 + id as i64,
            payload: payload.to_vec(),
        }
    }

    fn segment(records: &[Record]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            r.encode_into(&mut out);
        }
        out
    }

    #[test]
    fn a_flipped_byte_loses_only_its_record() {
        let records: Vec<_> = (1..=3).map(|id| record(id, b"{\"x\":1}")).collect();
        let mut bytes = segment(&records);
        let second = records[0].disk_len();
        bytes[second + HEADER_LEN + 2] ^= 0x40;
        let scan = scan(&bytes);
        let ids: Vec<u64> = scan.records.iter().map(|(_, r)| r.id).collect();
        assert_eq!(ids, [1, 3]);
        assert_eq!(scan.corrupt_at, [second as u64]);
    }

    #[test]
    fn a_torn_tail_is_reported() {
        let records: Vec<_> = (1..=2).map(|id| record(id, b"payload")).collect();
        let bytes = segment(&records);
        let cut = &bytes[..bytes.len() - 3];
        let scan = scan(cut);
        assert_eq!(scan.records.len(), 1);
        assert_eq!(scan.corrupt_at, [records[0].disk_len() as u64]);
    }

    proptest! {
        #[test]
        fn records_round_trip(id in any::<u64>(), created in any::<i64>(), payload in proptest::collection::vec(any::<u8>(), 0..512)) {
            let r = Record { id, created_ms: created, payload };
            let mut bytes = Vec::new();
            r.encode_into(&mut bytes);
            prop_assert_eq!(announced_len(&bytes), Some(bytes.len()));
            prop_assert_eq!(decode(&bytes), Decoded::Record(r.clone(), bytes.len()));
        }

        #[test]
        fn scanning_garbage_never_panics_and_finds_no_false_records(
            garbage in proptest::collection::vec(any::<u8>(), 0..2048)
        ) {
            let scan = scan(&garbage);
            // Random bytes essentially never carry a valid checksummed record.
            prop_assert!(scan.records.is_empty());
        }

        #[test]
        fn any_single_byte_flip_is_detected(index in 0usize..60, bit in 0u8..8) {
            let r = record(42, b"{\"lat\":47.1,\"lon\":8.5}");
            let mut bytes = Vec::new();
            r.encode_into(&mut bytes);
            let index = index % bytes.len();
            bytes[index] ^= 1 << bit;
            prop_assert_eq!(decode(&bytes), Decoded::Corrupt);
        }
    }
}

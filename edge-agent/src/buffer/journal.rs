//! The acknowledgement journal `acks.log`: one 12-byte entry per id the broker
//! acknowledged (the id and its CRC-32, little-endian), appended without fsync and read
//! back at start, a damaged entry skipped.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

/// The journal's file name in the buffer directory.
pub(super) const JOURNAL: &str = "acks.log";
/// Bytes of one entry.
pub(super) const JOURNAL_ENTRY: usize = 12;

/// A journal entry: the id and its CRC-32.
pub(super) fn journal_entry(id: u64) -> [u8; JOURNAL_ENTRY] {
    let mut entry = [0u8; JOURNAL_ENTRY];
    entry[..8].copy_from_slice(&id.to_le_bytes());
    entry[8..].copy_from_slice(&crc32fast::hash(&id.to_le_bytes()).to_le_bytes());
    entry
}

/// The acknowledged ids in the journal; a damaged entry is skipped.
pub(super) fn read_journal(path: &Path) -> io::Result<BTreeSet<u64>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(err) => return Err(err),
    };
    let mut acked = BTreeSet::new();
    let mut skipped = 0;
    for entry in bytes.chunks(JOURNAL_ENTRY) {
        let valid = entry.len() == JOURNAL_ENTRY
            && crc32fast::hash(&entry[..8]).to_le_bytes() == entry[8..];
        if valid {
            acked.insert(u64::from_le_bytes(entry[..8].try_into().expect("8 bytes")));
        } else {
            skipped += 1;
        }
    }
    if skipped > 0 {
        tracing::warn!(
            file = %path.display(),
            entries = skipped,
            "damaged acknowledgement entries skipped (those messages are sent again)"
        );
    }
    Ok(acked)
}

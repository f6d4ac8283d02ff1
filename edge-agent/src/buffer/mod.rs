//! Store-and-forward on disk: every message is written here before it is published and
//! leaves only when the broker acknowledged it.
//!
//! # Layout
//! `BUFFER_DIR` holds segment files `seg-{first id:020}.log` of checksummed records
//! (format in [`record`]) and an acknowledgement journal `acks.log` of the ids the broker
//! acknowledged (12 bytes each: id and its CRC-32). A record's id is the message's `seq`.
//!
//! # Write and fsync policy
//! - Each message is appended as one record to the newest segment and, with
//!   [`BufferConfig::fsync`] on (the default), `fdatasync`ed before it is published; a
//!   new segment file also syncs the directory. A power cut therefore loses at most the
//!   record being written (less than one report interval); a torn record is detected by
//!   its checksum on the next start, reported and skipped.
//! - Acknowledgements are appended to the journal without fsync: a power cut can forget
//!   a few acknowledgements, and those messages are sent again (at-least-once; the cloud
//!   keeps the newest position).
//! - Segments whose records are all acknowledged are deleted; the newest segment is kept
//!   so that ids continue after a restart without reuse. The journal is compacted when
//!   most of its entries refer to deleted segments.
//!
//! # Bounds and damage
//! - The segment files hold at most [`BufferConfig::max_bytes`] (plus one segment of
//!   slack): when an append goes over, the oldest segments are deleted and their
//!   unacknowledged records counted as dropped (`buffer_full`). Segments are a sixteenth
//!   of the bound but at most 128 KiB, so a drop loses at most the oldest sixteenth.
//! - A record with a wrong checksum is skipped, counted (`corrupt`) and logged with its
//!   file and offset, on start and when it is read for sending; the rest of the segment
//!   is still read.

mod config;
mod journal;
pub mod record;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use journal::{JOURNAL, JOURNAL_ENTRY, journal_entry, read_journal};

pub use config::{BufferConfig, DEFAULT_BUFFER_MAX_BYTES, MIN_BUFFER_MAX_BYTES};
pub use record::Record;

const SEGMENT_PREFIX: &str = "seg-";
const SEGMENT_SUFFIX: &str = ".log";
/// Journal entries kept beyond twice the live acknowledged ids before compacting.
const JOURNAL_SLACK: u64 = 1024;
/// The largest segment: about 500 messages, so that the acknowledged ids of live
/// segments (kept in memory) stay few.
const MAX_SEGMENT_BYTES: u64 = 128 * 1024;

/// A failed buffer operation (the disk, not the data: damaged data is skipped).
#[derive(Debug, thiserror::Error)]
#[error("buffer {action} {path}: {source}")]
pub struct BufferError {
    action: &'static str,
    path: PathBuf,
    #[source]
    source: io::Error,
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> BufferError {
    let path = path.to_owned();
    move |source| BufferError {
        action,
        path,
        source,
    }
}

/// A record the buffer could not write (see [`DiskBuffer::append`]): why, and the
/// record, which may still be sent from memory.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct AppendError {
    /// The failed write or sync.
    #[source]
    pub error: BufferError,
    /// The record that is not on disk.
    pub record: Record,
}

/// Counters of the buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferStats {
    /// Records waiting for acknowledgement.
    pub depth: u64,
    /// Bytes of all segment files.
    pub bytes: u64,
    /// Unacknowledged records dropped because the buffer was full.
    pub dropped_full: u64,
    /// Corrupt records or regions skipped.
    pub corrupt: u64,
}

/// Where a pending record lives.
#[derive(Debug, Clone, Copy)]
struct Location {
    segment: u64,
    offset: u64,
    /// The record's creation time, Unix milliseconds.
    created_ms: i64,
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    bytes: u64,
    /// Unacknowledged records in this segment.
    pending: u64,
    /// The id after the last record written to this segment.
    end_id: u64,
}

/// The disk buffer of one agent. Not shared: the agent task owns it.
#[derive(Debug)]
pub struct DiskBuffer {
    dir: PathBuf,
    max_bytes: u64,
    segment_target: u64,
    fsync: bool,
    /// Segments by the id of their first record, oldest first.
    segments: BTreeMap<u64, Segment>,
    /// The segment appended to in this run (never one from an earlier run).
    active: Option<(u64, File)>,
    pending: BTreeMap<u64, Location>,
    /// Acknowledged ids still inside live segments (what a compacted journal holds).
    acked_live: BTreeSet<u64>,
    journal: File,
    journal_entries: u64,
    /// The last segment read from, kept open for the backlog.
    reader: Option<(u64, File)>,
    next_id: u64,
    bytes: u64,
    dropped_full: u64,
    corrupt: u64,
}

impl DiskBuffer {
    /// Opens (or creates) the buffer in `config.dir`, reading every segment and the
    /// journal. Corrupt records are skipped, counted and logged.
    pub fn open(config: &BufferConfig) -> Result<DiskBuffer, BufferError> {
        let dir = config.dir.clone();
        fs::create_dir_all(&dir).map_err(io_error("create", &dir))?;
        let journal_path = dir.join(JOURNAL);
        let acked = read_journal(&journal_path).map_err(io_error("read", &journal_path))?;
        let journal = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&journal_path)
            .map_err(io_error("open", &journal_path))?;
        let mut buffer = DiskBuffer {
            segment_target: (config.max_bytes / 16).clamp(1, MAX_SEGMENT_BYTES),
            max_bytes: config.max_bytes,
            fsync: config.fsync,
            segments: BTreeMap::new(),
            active: None,
            pending: BTreeMap::new(),
            acked_live: BTreeSet::new(),
            journal,
            journal_entries: 0,
            reader: None,
            next_id: acked.iter().next_back().map_or(1, |id| id + 1),
            bytes: 0,
            dropped_full: 0,
            corrupt: 0,
            dir,
        };
        for (first_id, path) in list_segments(&buffer.dir)? {
            buffer.load_segment(first_id, path, &acked)?;
        }
        buffer.delete_acked_segments()?;
        buffer.compact_journal()?;
        Ok(buffer)
    }

    fn load_segment(
        &mut self,
        first_id: u64,
        path: PathBuf,
        acked: &BTreeSet<u64>,
    ) -> Result<(), BufferError> {
        let bytes = fs::read(&path).map_err(io_error("read", &path))?;
        let scan = record::scan(&bytes);
        for offset in &scan.corrupt_at {
            tracing::warn!(file = %path.display(), offset, "corrupt buffer record skipped");
        }
        self.corrupt += scan.corrupt_at.len() as u64;
        let mut segment = Segment {
            path,
            bytes: bytes.len() as u64,
            pending: 0,
            end_id: first_id,
        };
        for (offset, record) in scan.records {
            segment.end_id = segment.end_id.max(record.id + 1);
            if acked.contains(&record.id) {
                self.acked_live.insert(record.id);
            } else {
                segment.pending += 1;
                self.pending.insert(
                    record.id,
                    Location {
                        segment: first_id,
                        offset,
                        created_ms: record.created_ms,
                    },
                );
            }
        }
        self.next_id = self.next_id.max(segment.end_id);
        self.bytes += segment.bytes;
        self.segments.insert(first_id, segment);
        Ok(())
    }

    /// The id (and `seq`) the next appended record gets.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The counters.
    pub fn stats(&self) -> BufferStats {
        BufferStats {
            depth: self.pending.len() as u64,
            bytes: self.bytes,
            dropped_full: self.dropped_full,
            corrupt: self.corrupt,
        }
    }

    /// Appends a record with id [`DiskBuffer::next_id`] (synced if so configured), then
    /// drops the oldest segments if the buffer is over its bound. Returns the record.
    ///
    /// If the write or the sync fails (a full disk, an I/O error), the segment is cut back
    /// to its last whole record, or, if even that fails, no longer appended to, so that
    /// later records are not read as damaged; the id is used up all the same and marked
    /// in the journal (the caller may still send the record from memory, and no later
    /// record gets its `seq`, across restarts too while the journal can be written).
    pub fn append(&mut self, created_ms: i64, payload: Vec<u8>) -> Result<Record, AppendError> {
        let record = Record {
            id: self.next_id,
            created_ms,
            payload,
        };
        self.next_id += 1;
        let mut bytes = Vec::with_capacity(record.disk_len());
        record.encode_into(&mut bytes);
        let first_id = match self.active_segment(record.id) {
            Ok(first_id) => first_id,
            Err(error) => {
                if let Err(err) = self.journal_ack(record.id) {
                    tracing::warn!(%err, id = record.id, "refused id not journaled");
                }
                return Err(AppendError { error, record });
            }
        };
        let segment = self.segments.get_mut(&first_id).expect("active segment");
        let (_, file) = self.active.as_mut().expect("active segment");
        let written = file
            .write_all(&bytes)
            .map_err(io_error("append to", &segment.path))
            .and_then(|()| {
                if self.fsync {
                    file.sync_data().map_err(io_error("sync", &segment.path))
                } else {
                    Ok(())
                }
            });
        if let Err(error) = written {
            if let Err(cut) = file.set_len(segment.bytes) {
                tracing::error!(%cut, file = %segment.path.display(), "buffer segment not cut back; starting a new one");
                self.active = None;
            }
            // The journal marks the id as used, so that it is not given out again after
            // a restart (if the journal can be written).
            if let Err(err) = self.journal_ack(record.id) {
                tracing::warn!(%err, id = record.id, "refused id not journaled");
            }
            return Err(AppendError { error, record });
        }
        self.pending.insert(
            record.id,
            Location {
                segment: first_id,
                offset: segment.bytes,
                created_ms: record.created_ms,
            },
        );
        segment.bytes += bytes.len() as u64;
        segment.pending += 1;
        segment.end_id = record.id + 1;
        self.bytes += bytes.len() as u64;
        if segment.bytes >= self.segment_target {
            self.active = None;
        }
        // The record is on disk; a segment that cannot be deleted is tried again at the
        // next append.
        if let Err(err) = self.enforce_bound() {
            tracing::error!(%err, "buffer over its bound");
        }
        Ok(record)
    }

    /// The segment to append to, creating one starting at `id` if needed.
    fn active_segment(&mut self, id: u64) -> Result<u64, BufferError> {
        if let Some((first_id, _)) = &self.active {
            return Ok(*first_id);
        }
        let path = self
            .dir
            .join(format!("{SEGMENT_PREFIX}{id:020}{SEGMENT_SUFFIX}"));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_error("create", &path))?;
        if self.fsync {
            File::open(&self.dir)
                .and_then(|dir| dir.sync_all())
                .map_err(io_error("sync", &self.dir))?;
        }
        // A segment of an earlier run can start at this id if none of its records
        // survived; appending continues after its bytes.
        self.segments.entry(id).or_insert(Segment {
            path,
            bytes: 0,
            pending: 0,
            end_id: id,
        });
        self.active = Some((id, file));
        Ok(id)
    }

    /// Deletes the oldest segments while over the bound, counting their pending records.
    fn enforce_bound(&mut self) -> Result<(), BufferError> {
        while self.bytes > self.max_bytes && self.segments.len() > 1 {
            let (&first_id, _) = self.segments.first_key_value().expect("segments");
            let lost = self.remove_segment(first_id)?;
            if lost > 0 {
                tracing::warn!(
                    records = lost,
                    "buffer full: dropped the oldest unacknowledged records"
                );
            }
            self.dropped_full += lost;
        }
        Ok(())
    }

    /// Removes a segment and its pending records; returns how many were pending.
    fn remove_segment(&mut self, first_id: u64) -> Result<u64, BufferError> {
        let segment = self.segments.remove(&first_id).expect("known segment");
        if self.active.as_ref().is_some_and(|(id, _)| *id == first_id) {
            self.active = None;
        }
        if self.reader.as_ref().is_some_and(|(id, _)| *id == first_id) {
            self.reader = None;
        }
        let ids = first_id..segment.end_id;
        let lost: Vec<u64> = self.pending.range(ids.clone()).map(|(id, _)| *id).collect();
        for id in &lost {
            self.pending.remove(id);
        }
        let acked: Vec<u64> = self.acked_live.range(ids).copied().collect();
        for id in acked {
            self.acked_live.remove(&id);
        }
        self.bytes -= segment.bytes;
        match fs::remove_file(&segment.path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_error("delete", &segment.path)(err)),
        }
        Ok(lost.len() as u64)
    }

    /// Ids waiting for acknowledgement, oldest first, from `from` on.
    pub fn pending_from(&self, from: u64) -> impl Iterator<Item = u64> + '_ {
        self.pending.range(from..).map(|(id, _)| *id)
    }

    /// When the oldest record waiting for acknowledgement was made, Unix milliseconds.
    pub fn oldest_pending_created_ms(&self) -> Option<i64> {
        self.pending
            .values()
            .next()
            .map(|location| location.created_ms)
    }

    /// The newest id waiting for acknowledgement.
    pub fn newest_pending(&self) -> Option<u64> {
        self.pending.keys().next_back().copied()
    }

    /// Whether `id` waits for acknowledgement.
    pub fn is_pending(&self, id: u64) -> bool {
        self.pending.contains_key(&id)
    }

    /// Reads a pending record from disk. `None` if it is not pending, or if it turned out
    /// to be corrupt (then it is counted, logged and forgotten).
    pub fn read(&mut self, id: u64) -> Result<Option<Record>, BufferError> {
        let Some(location) = self.pending.get(&id).copied() else {
            return Ok(None);
        };
        let segment = &self.segments[&location.segment];
        if self
            .reader
            .as_ref()
            .is_none_or(|(first_id, _)| *first_id != location.segment)
        {
            let file = File::open(&segment.path).map_err(io_error("open", &segment.path))?;
            self.reader = Some((location.segment, file));
        }
        let (_, file) = self.reader.as_ref().expect("reader just opened");
        let decoded = read_record_at(file, location.offset)
            .map_err(io_error("read", &segment.path))?
            .filter(|record| record.id == id);
        if decoded.is_none() {
            tracing::warn!(
                file = %segment.path.display(),
                offset = location.offset,
                id,
                "corrupt buffer record skipped"
            );
            self.corrupt += 1;
            self.forget(id, location.segment);
        }
        Ok(decoded)
    }

    fn forget(&mut self, id: u64, segment: u64) {
        self.pending.remove(&id);
        if let Some(segment) = self.segments.get_mut(&segment) {
            segment.pending -= 1;
        }
    }

    /// Records the broker's acknowledgement of `id`: journals it and deletes segments that
    /// no longer hold anything pending. Unknown ids (already acknowledged, or dropped) are
    /// ignored.
    pub fn ack(&mut self, id: u64) -> Result<(), BufferError> {
        let Some(location) = self.pending.get(&id).copied() else {
            return Ok(());
        };
        self.forget(id, location.segment);
        self.acked_live.insert(id);
        self.journal_ack(id)?;
        if self.segments[&location.segment].pending == 0 {
            self.delete_acked_segments()?;
        }
        if self.journal_entries > 2 * self.acked_live.len() as u64 + JOURNAL_SLACK {
            self.compact_journal()?;
        }
        Ok(())
    }

    fn journal_ack(&mut self, id: u64) -> Result<(), BufferError> {
        let path = self.dir.join(JOURNAL);
        self.journal
            .write_all(&journal_entry(id))
            .map_err(io_error("append to", &path))?;
        self.journal_entries += 1;
        Ok(())
    }

    /// Deletes fully acknowledged segments other than the newest and the active one.
    fn delete_acked_segments(&mut self) -> Result<(), BufferError> {
        let newest = self.segments.keys().next_back().copied();
        let active = self.active.as_ref().map(|(id, _)| *id);
        let done: Vec<u64> = self
            .segments
            .iter()
            .filter(|(id, segment)| {
                segment.pending == 0 && Some(**id) != newest && Some(**id) != active
            })
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            self.remove_segment(id)?;
        }
        Ok(())
    }

    /// Rewrites the journal with only the acknowledged ids of live segments.
    fn compact_journal(&mut self) -> Result<(), BufferError> {
        let path = self.dir.join(JOURNAL);
        let tmp = self.dir.join("acks.log.tmp");
        let mut bytes = Vec::with_capacity((self.acked_live.len() + 1) * JOURNAL_ENTRY);
        for id in &self.acked_live {
            bytes.extend_from_slice(&journal_entry(*id));
        }
        // The last id given out, if no segment shows it (a record the disk refused):
        // ids continue after it.
        let last = self.next_id - 1;
        let shown = self
            .segments
            .values()
            .next_back()
            .is_some_and(|segment| segment.end_id > last);
        if last > 0 && !shown && !self.acked_live.contains(&last) {
            bytes.extend_from_slice(&journal_entry(last));
        }
        let mut file = File::create(&tmp).map_err(io_error("create", &tmp))?;
        file.write_all(&bytes).map_err(io_error("write", &tmp))?;
        file.sync_data().map_err(io_error("sync", &tmp))?;
        fs::rename(&tmp, &path).map_err(io_error("replace", &path))?;
        self.journal = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_error("open", &path))?;
        self.journal_entries = self.acked_live.len() as u64;
        Ok(())
    }

    /// Syncs the active segment and the journal (on shutdown).
    pub fn sync(&mut self) -> Result<(), BufferError> {
        if let Some((first_id, file)) = &self.active {
            file.sync_data()
                .map_err(io_error("sync", &self.segments[first_id].path))?;
        }
        self.journal
            .sync_data()
            .map_err(io_error("sync", &self.dir.join(JOURNAL)))
    }
}

/// Reads one record at `offset`; `None` if it is not a valid record.
fn read_record_at(file: &File, offset: u64) -> io::Result<Option<Record>> {
    let mut header = [0u8; record::HEADER_LEN];
    if let Err(err) = file.read_exact_at(&mut header, offset) {
        return if err.kind() == io::ErrorKind::UnexpectedEof {
            Ok(None)
        } else {
            Err(err)
        };
    }
    let Some(len) = record::announced_len(&header) else {
        return Ok(None);
    };
    if len > record::HEADER_LEN + telemetry::wire::MAX_MESSAGE_BYTES {
        return Ok(None);
    }
    let mut bytes = vec![0u8; len];
    match file.read_exact_at(&mut bytes, offset) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(err) => return Err(err),
    }
    Ok(match record::decode(&bytes) {
        record::Decoded::Record(record, _) => Some(record),
        record::Decoded::Corrupt => None,
    })
}

/// The segment files of `dir` by first id.
fn list_segments(dir: &Path) -> Result<BTreeMap<u64, PathBuf>, BufferError> {
    let mut segments = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(io_error("list", dir))? {
        let entry = entry.map_err(io_error("list", dir))?;
        let name = entry.file_name();
        let first_id = name
            .to_str()
            .and_then(|n| n.strip_prefix(SEGMENT_PREFIX))
            .and_then(|n| n.strip_suffix(SEGMENT_SUFFIX))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(first_id) = first_id {
            segments.insert(first_id, entry.path());
        }
    }
    Ok(segments)
}

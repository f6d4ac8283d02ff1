//! A partition's events on disk (`--data-dir`): an append-only log in segment files
//! `{data-dir}/{partition}/{first sequence number:020}.log`, each event one record
//! (`u32` length, `u32` CRC-32 of the rest, then the event's fields). A batch of records is
//! written and made durable with one `fdatasync` (group commit); a new segment starts once the
//! current one holds `segment_bytes`. On start the records are read back in order; a torn
//! tail of the last segment (a crash in the middle of a write) is cut off, anything else that
//! does not read back is an error. Whole segments whose events retention dropped are deleted;
//! the last segment is always kept, so the numbering continues after a restart.

use super::event::{AuthMethod, Event, Incoming, MessageSource};
use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The default size at which a partition's log starts a new segment.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes of a record's header: its length and its checksum.
const HEADER: usize = 8;

/// Why a data directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// A file of the data directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A record other than the last segment's tail does not read back.
    #[error("{}: the record at byte {at} does not read back", path.display())]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Where the bad record starts.
        at: usize,
    },
    /// The data directory was written by a hub with another number of partitions.
    #[error("{}: written with {found} partitions, not {wanted}", path.display())]
    PartitionCount {
        /// The file that says how many.
        path: PathBuf,
        /// Partitions in the directory.
        found: usize,
        /// Partitions asked for.
        wanted: usize,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DiskError + '_ {
    move |source| DiskError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Checks (or, in a new directory, records) how many partitions `dir` holds.
pub fn check_partition_count(dir: &Path, wanted: usize) -> Result<(), DiskError> {
    fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join("partitions");
    match fs::read_to_string(&path) {
        Ok(text) => {
            let found = text.trim().parse().unwrap_or(0);
            if found == wanted {
                Ok(())
            } else {
                Err(DiskError::PartitionCount {
                    path,
                    found,
                    wanted,
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::write(&path, format!("{wanted}\n")).map_err(io(&path))?;
            sync_dir(dir)
        }
        Err(e) => Err(io(&path)(e)),
    }
}

fn sync_dir(dir: &Path) -> Result<(), DiskError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Appends `event` as one record to `out`.
pub fn encode(event: &Event, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    let m = &event.message;
    out.extend_from_slice(&event.sequence_number.to_le_bytes());
    out.extend_from_slice(&event.offset.to_le_bytes());
    out.extend_from_slice(&event.enqueued_ms.to_le_bytes());
    // The low four bits say how the sender authenticated, the high four the data source
    // (0, telemetry, in records written before non-telemetry events existed).
    let auth = match m.auth {
        AuthMethod::Sas => 0,
        AuthMethod::X509 => 1,
        AuthMethod::Api => 2,
    };
    let source = match m.source {
        MessageSource::Telemetry => 0,
        MessageSource::DeviceConnectionStateEvents => 1,
        MessageSource::TwinChangeEvents => 2,
    };
    out.push(auth | (source << 4));
    put(out, m.device_id.as_bytes());
    for field in [
        &m.message_id,
        &m.correlation_id,
        &m.user_id,
        &m.content_type,
        &m.content_encoding,
    ] {
        match field {
            Some(text) => {
                out.push(1);
                put(out, text.as_bytes());
            }
            None => out.push(0),
        }
    }
    out.extend_from_slice(&(m.properties.len() as u32).to_le_bytes());
    for (k, v) in &m.properties {
        put(out, k.as_bytes());
        put(out, v.as_bytes());
    }
    put(out, &m.body);
    let len = (out.len() - start - HEADER) as u32;
    let crc = crc32fast::hash(&out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads fields off a record's bytes.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    }

    fn i64(&mut self) -> Option<i64> {
        self.take(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }

    fn optional(&mut self) -> Option<Option<String>> {
        match self.u8()? {
            0 => Some(None),
            1 => self.string().map(Some),
            _ => None,
        }
    }
}

/// The event in a record's body (after the header), if it reads back whole.
fn decode(record: &[u8]) -> Option<Event> {
    let mut f = Fields(record);
    let sequence_number = f.i64()?;
    let offset = f.i64()?;
    let enqueued_ms = f.i64()?;
    let kind = f.u8()?;
    let auth = match kind & 0x0f {
        0 => AuthMethod::Sas,
        1 => AuthMethod::X509,
        2 => AuthMethod::Api,
        _ => return None,
    };
    let source = match kind >> 4 {
        0 => MessageSource::Telemetry,
        1 => MessageSource::DeviceConnectionStateEvents,
        2 => MessageSource::TwinChangeEvents,
        _ => return None,
    };
    let device_id = std::str::from_utf8(f.bytes()?).ok()?.into();
    let message_id = f.optional()?;
    let correlation_id = f.optional()?;
    let user_id = f.optional()?;
    let content_type = f.optional()?;
    let content_encoding = f.optional()?;
    let count = f.u32()? as usize;
    let mut properties = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        properties.push((f.string()?, f.string()?));
    }
    let body = Bytes::copy_from_slice(f.bytes()?);
    if !f.0.is_empty() {
        return None;
    }
    Some(Event {
        sequence_number,
        offset,
        enqueued_ms,
        message: Incoming {
            device_id,
            auth,
            source,
            body,
            message_id,
            correlation_id,
            user_id,
            content_type,
            content_encoding,
            properties,
        },
    })
}

/// The events of `bytes` in order, and how many bytes of it read back as whole records.
fn records(bytes: &[u8], mut each: impl FnMut(Event)) -> usize {
    let mut at = 0;
    while bytes.len() - at >= HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + HEADER].try_into().unwrap());
        let Some(record) = bytes.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        if crc32fast::hash(record) != crc {
            break;
        }
        let Some(event) = decode(record) else { break };
        each(event);
        at += HEADER + len;
    }
    at
}

/// One partition's segment files, the last of them open for appends.
#[derive(Debug)]
pub struct SegmentLog {
    dir: PathBuf,
    segment_bytes: u64,
    /// Every segment, oldest first: its first sequence number and its path.
    segments: Vec<(i64, PathBuf)>,
    file: File,
    /// Bytes of the last segment known durable.
    size: u64,
}

fn segment_path(dir: &Path, first: i64) -> PathBuf {
    dir.join(format!("{first:020}.log"))
}

impl SegmentLog {
    /// Opens (or creates) the log in `dir`, handing every kept event to `each` in order and
    /// cutting a torn tail off the last segment.
    pub fn open(
        dir: &Path,
        segment_bytes: u64,
        mut each: impl FnMut(Event),
    ) -> Result<SegmentLog, DiskError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        let mut segments = Vec::new();
        for entry in fs::read_dir(dir).map_err(io(dir))? {
            let path = entry.map_err(io(dir))?.path();
            let first = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.parse::<i64>().ok());
            if let Some(first) = first {
                segments.push((first, path));
            }
        }
        segments.sort();
        if segments.is_empty() {
            let path = segment_path(dir, 0);
            File::create(&path).map_err(io(&path))?;
            sync_dir(dir)?;
            segments.push((0, path));
        }
        let mut expected: Option<i64> = None;
        let mut size = 0;
        let last = segments.len() - 1;
        for (i, (first, path)) in segments.iter().enumerate() {
            let bytes = fs::read(path).map_err(io(path))?;
            let mut out_of_order = None;
            let good = records(&bytes, |event| {
                let wanted = expected.unwrap_or(*first);
                if event.sequence_number != wanted && out_of_order.is_none() {
                    out_of_order = Some(event.sequence_number);
                }
                expected = Some(event.sequence_number + 1);
                each(event);
            });
            if out_of_order.is_some() || (good < bytes.len() && i != last) {
                return Err(DiskError::Corrupt {
                    path: path.clone(),
                    at: good,
                });
            }
            if good < bytes.len() {
                tracing::warn!(segment = %path.display(), kept = good, cut = bytes.len() - good, "cutting a torn tail off the partition log");
                let file = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io(path))?;
                file.set_len(good as u64).map_err(io(path))?;
                file.sync_data().map_err(io(path))?;
            }
            size = good as u64;
        }
        let path = &segments[last].1;
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io(path))?;
        Ok(SegmentLog {
            dir: dir.to_owned(),
            segment_bytes,
            segments,
            file,
            size,
        })
    }

    /// Writes `records` (whose first event is sequence number `first`) and makes them
    /// durable, starting a new segment first if the current one is full. On an error the
    /// segment is cut back to its last durable size, so the batch can be written again.
    pub fn append(&mut self, records: &[u8], first: i64) -> Result<(), DiskError> {
        if self.size >= self.segment_bytes {
            let path = segment_path(&self.dir, first);
            self.file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(io(&path))?;
            sync_dir(&self.dir)?;
            self.segments.push((first, path));
            self.size = 0;
        }
        let path = &self.segments[self.segments.len() - 1].1;
        let written = self
            .file
            .write_all(records)
            .and_then(|()| self.file.sync_data());
        if let Err(source) = written {
            let _ = self.file.set_len(self.size);
            return Err(DiskError::Io {
                path: path.clone(),
                source,
            });
        }
        self.size += records.len() as u64;
        Ok(())
    }

    /// Deletes the segments (never the last) whose events all come before sequence number
    /// `begin`, the first one retention keeps.
    pub fn drop_before(&mut self, begin: i64) {
        while self.segments.len() > 1 && self.segments[1].0 <= begin {
            let (_, path) = self.segments.remove(0);
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(segment = %path.display(), error = %e, "could not delete a segment retention dropped");
            }
        }
    }

    /// The segment files now, oldest first.
    #[cfg(test)]
    pub fn segments(&self) -> impl Iterator<Item = &Path> {
        self.segments.iter().map(|(_, p)| p.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence_number: i64, body: &str) -> Event {
        let mut message = Incoming::new("drone-1", body.to_owned());
        message.auth = AuthMethod::X509;
        message.content_type = Some("application/json".into());
        message.properties = vec![("k".into(), "v".into())];
        Event {
            sequence_number,
            offset: sequence_number * 10,
            enqueued_ms: 1_700_000_000_000 + sequence_number,
            message,
        }
    }

    fn reopen(dir: &Path, segment_bytes: u64) -> (SegmentLog, Vec<Event>) {
        let mut events = Vec::new();
        let log = SegmentLog::open(dir, segment_bytes, |e| events.push(e)).unwrap();
        (log, events)
    }

    fn batch(range: std::ops::Range<i64>) -> Vec<u8> {
        let mut out = Vec::new();
        for i in range {
            encode(&event(i, &format!("body {i}")), &mut out);
        }
        out
    }

    #[test]
    fn records_read_back_whole_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, events) = reopen(dir.path(), DEFAULT_SEGMENT_BYTES);
        assert!(events.is_empty());
        log.append(&batch(0..3), 0).unwrap();
        drop(log);
        let segment = dir.path().join(format!("{:020}.log", 0));
        let whole = fs::metadata(&segment).unwrap().len();
        // Half a record, as a crash in the middle of a write leaves it.
        let torn = batch(3..4);
        OpenOptions::new()
            .append(true)
            .open(&segment)
            .unwrap()
            .write_all(&torn[..torn.len() / 2])
            .unwrap();
        let (mut log, events) = reopen(dir.path(), DEFAULT_SEGMENT_BYTES);
        assert_eq!(
            events,
            (0..3)
                .map(|i| event(i, &format!("body {i}")))
                .collect::<Vec<_>>()
        );
        assert_eq!(fs::metadata(&segment).unwrap().len(), whole);
        log.append(&batch(3..5), 3).unwrap();
        let (_, events) = reopen(dir.path(), DEFAULT_SEGMENT_BYTES);
        assert_eq!(events.len(), 5);
        assert_eq!(events[4], event(4, "body 4"));
    }

    #[test]
    fn a_bad_record_before_the_last_segment_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = reopen(dir.path(), 1);
        log.append(&batch(0..2), 0).unwrap();
        log.append(&batch(2..4), 2).unwrap();
        assert_eq!(log.segments().count(), 2);
        drop(log);
        let first = dir.path().join(format!("{:020}.log", 0));
        let mut bytes = fs::read(&first).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&first, bytes).unwrap();
        let error = SegmentLog::open(dir.path(), 1, |_| {}).unwrap_err();
        assert!(matches!(error, DiskError::Corrupt { .. }), "{error}");
    }

    #[test]
    fn segments_roll_and_dropped_ones_are_deleted_but_never_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = reopen(dir.path(), 1);
        for i in 0..4 {
            log.append(&batch(i * 2..i * 2 + 2), i * 2).unwrap();
        }
        assert_eq!(log.segments().count(), 4);
        log.drop_before(5);
        assert_eq!(log.segments().count(), 2, "segments from 4 and 6 are kept");
        log.drop_before(100);
        assert_eq!(log.segments().count(), 1);
        let (_, events) = reopen(dir.path(), 1);
        let seqs: Vec<_> = events.iter().map(|e| e.sequence_number).collect();
        assert_eq!(seqs, vec![6, 7]);
    }

    #[test]
    fn the_partition_count_must_match() {
        let dir = tempfile::tempdir().unwrap();
        check_partition_count(dir.path(), 4).unwrap();
        check_partition_count(dir.path(), 4).unwrap();
        assert!(matches!(
            check_partition_count(dir.path(), 2),
            Err(DiskError::PartitionCount { found: 4, .. })
        ));
    }
}

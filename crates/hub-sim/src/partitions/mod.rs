//! The partitions of the built-in endpoint's Event Hubs-compatible stream, and routing to them.
//!
//! Every accepted device message lands in one partition chosen by a stable hash of the device
//! id (FNV-1a, so one device is always in one partition, in its publish order) and gets that
//! partition's next sequence number, its offset (bytes of the partition's stream before it)
//! and the time it was enqueued. Retention drops the oldest events once a partition holds more
//! than a count or a byte budget. Readers wait on a watch of the partition's next readable
//! sequence number. The partitions know nothing of MQTT or AMQP.
//!
//! With a data directory ([`Partitions::open`]) an event becomes readable, and its watch moves
//! past it, only once it is durable: each partition has a writer thread that takes every event
//! appended since its last write and makes them durable together ([`disk`]); a device's
//! PUBACK waits on the same watch. Without one, an event is readable when it is appended.

pub mod disk;
mod event;

pub use event::{AuthMethod, Event, Incoming, MessageSource};

use disk::{DiskError, SegmentLog};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::watch;

/// Retention bounds per partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The most events a partition keeps.
    pub max_events: usize,
    /// The most body bytes a partition keeps.
    pub max_bytes: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_events: 1_000_000,
            max_bytes: 512 * 1024 * 1024,
        }
    }
}

/// What a partition holds, for management reads and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    /// The oldest sequence number kept (the next one when empty).
    pub begin_sequence_number: i64,
    /// The last sequence number enqueued, -1 if none ever was.
    pub last_sequence_number: i64,
    /// The offset of the last event, -1 if none.
    pub last_offset: i64,
    /// When the last event was enqueued (ms since the epoch), 0 if none.
    pub last_enqueued_ms: i64,
    /// Events kept.
    pub depth: usize,
    /// Body bytes kept.
    pub bytes: usize,
}

impl PartitionInfo {
    /// Whether the partition keeps no event.
    pub fn is_empty(&self) -> bool {
        self.depth == 0
    }
}

#[derive(Debug, Default)]
struct Log {
    /// The readable events retention keeps.
    events: VecDeque<Arc<Event>>,
    /// The sequence number the next appended event gets.
    next_sequence: i64,
    /// The sequence number after the last readable event.
    readable: i64,
    next_offset: i64,
    bytes: usize,
    last_enqueued_ms: i64,
    /// Records of the appended events not yet durable (with a data directory).
    pending: Vec<u8>,
    /// Those events.
    pending_events: Vec<Arc<Event>>,
    /// The writer is asked to write what is pending and stop.
    closing: bool,
}

impl Log {
    /// Gives `message` the partition's next sequence number, offset and enqueued time.
    fn assign(&mut self, message: Incoming, now_ms: i64) -> Arc<Event> {
        let event = Arc::new(Event {
            sequence_number: self.next_sequence,
            offset: self.next_offset,
            enqueued_ms: now_ms.max(self.last_enqueued_ms),
            message,
        });
        self.next_sequence += 1;
        self.next_offset += event.message.body.len().max(1) as i64;
        self.last_enqueued_ms = event.enqueued_ms;
        event
    }

    /// Makes `event` readable and drops what retention no longer keeps.
    fn keep(&mut self, event: Arc<Event>, retention: Retention) {
        self.readable = event.sequence_number + 1;
        self.bytes += event.message.body.len();
        self.events.push_back(event);
        while self.events.len() > retention.max_events
            || (self.bytes > retention.max_bytes && self.events.len() > 1)
        {
            if let Some(old) = self.events.pop_front() {
                self.bytes -= old.message.body.len();
            }
        }
    }

    /// Takes back an event read from the data directory: the numbering continues after it.
    fn restore(&mut self, event: Event, retention: Retention) {
        self.next_sequence = event.sequence_number + 1;
        self.next_offset = event.offset + event.message.body.len().max(1) as i64;
        self.last_enqueued_ms = event.enqueued_ms;
        self.keep(Arc::new(event), retention);
    }

    /// The first sequence number kept (the next readable one when none is).
    fn begin(&self) -> i64 {
        self.events
            .front()
            .map_or(self.readable, |e| e.sequence_number)
    }
}

/// One partition.
#[derive(Debug)]
pub struct Partition {
    log: Mutex<Log>,
    /// The sequence number after the last readable event.
    next: watch::Sender<i64>,
    /// Whether appends go to a writer thread (a data directory) before they are readable.
    durable: bool,
    /// Wakes the writer.
    wake: Condvar,
}

/// Where a reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The first event with a sequence number at or after this.
    Sequence(i64),
    /// The first event with an offset above (or at, if inclusive) this.
    Offset(i64, bool),
    /// The first event enqueued after (or at, if inclusive) this time, ms since the epoch.
    EnqueuedTime(i64, bool),
    /// Only events enqueued from now on.
    Latest,
}

impl Partition {
    fn new(log: Log, durable: bool) -> Partition {
        Partition {
            next: watch::channel(log.readable).0,
            log: Mutex::new(log),
            durable,
            wake: Condvar::new(),
        }
    }

    fn append(&self, message: Incoming, now_ms: i64, retention: Retention) -> Arc<Event> {
        let mut log = self.log.lock();
        let event = log.assign(message, now_ms);
        if self.durable {
            disk::encode(&event, &mut log.pending);
            log.pending_events.push(event.clone());
            drop(log);
            self.wake.notify_one();
        } else {
            log.keep(event.clone(), retention);
            drop(log);
            self.next.send_replace(event.sequence_number + 1);
        }
        event
    }

    /// Writes what is appended to `segments`, a batch at a time, until the partitions close.
    fn write_loop(&self, mut segments: SegmentLog, retention: Retention) {
        let mut records = Vec::new();
        loop {
            let events = {
                let mut log = self.log.lock();
                while log.pending_events.is_empty() && !log.closing {
                    self.wake.wait(&mut log);
                }
                if log.pending_events.is_empty() {
                    return;
                }
                records.clear();
                std::mem::swap(&mut records, &mut log.pending);
                std::mem::take(&mut log.pending_events)
            };
            let first = events[0].sequence_number;
            while let Err(e) = segments.append(&records, first) {
                tracing::error!(error = %e, "the partition log cannot be written; devices wait for their PUBACK, retrying in 1 s");
                if self.log.lock().closing {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            let (begin, next) = {
                let mut log = self.log.lock();
                for event in events {
                    log.keep(event, retention);
                }
                (log.begin(), log.readable)
            };
            self.next.send_replace(next);
            segments.drop_before(begin);
        }
    }

    /// The sequence number the next reader at `start` receives first.
    pub fn resolve(&self, start: StartAt) -> i64 {
        let log = self.log.lock();
        let found = |pred: &dyn Fn(&Event) -> bool| {
            log.events
                .iter()
                .find(|e| pred(e))
                .map_or(log.readable, |e| e.sequence_number)
        };
        match start {
            StartAt::Sequence(n) => n.max(log.begin()),
            StartAt::Latest => log.readable,
            StartAt::Offset(o, inclusive) => {
                found(&|e| e.offset > o || (inclusive && e.offset == o))
            }
            StartAt::EnqueuedTime(t, inclusive) => {
                found(&|e| e.enqueued_ms > t || (inclusive && e.enqueued_ms == t))
            }
        }
    }

    /// Up to `max` events from sequence number `from` on (skipping what retention dropped).
    pub fn read(&self, from: i64, max: usize, out: &mut Vec<Arc<Event>>) {
        let log = self.log.lock();
        let Some(first) = log.events.front().map(|e| e.sequence_number) else {
            return;
        };
        let skip = usize::try_from(from - first).unwrap_or(0);
        out.extend(log.events.iter().skip(skip).take(max).cloned());
    }

    /// A watch of the sequence number after the last readable event: an appended event is
    /// readable (and durable, with a data directory) once it has moved past it.
    pub fn watch(&self) -> watch::Receiver<i64> {
        self.next.subscribe()
    }

    /// What the partition holds now.
    pub fn info(&self) -> PartitionInfo {
        let log = self.log.lock();
        let last = log.events.back();
        PartitionInfo {
            begin_sequence_number: log.begin(),
            last_sequence_number: log.readable - 1,
            last_offset: last.map_or(-1, |e| e.offset),
            last_enqueued_ms: last.map_or(0, |e| e.enqueued_ms),
            depth: log.events.len(),
            bytes: log.bytes,
        }
    }
}

/// All partitions of the hub's built-in endpoint.
#[derive(Debug)]
pub struct Partitions {
    partitions: Vec<Arc<Partition>>,
    retention: Retention,
    /// The writer threads (with a data directory).
    writers: Mutex<Vec<JoinHandle<()>>>,
}

/// Where and how the partitions are kept on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    /// The directory: one subdirectory of segment files per partition.
    pub dir: PathBuf,
    /// The size at which a partition's log starts a new segment file (retention deletes
    /// whole segments).
    pub segment_bytes: u64,
}

impl DataDir {
    /// `dir` with segments of [`disk::DEFAULT_SEGMENT_BYTES`].
    pub fn new(dir: impl Into<PathBuf>) -> DataDir {
        DataDir {
            dir: dir.into(),
            segment_bytes: disk::DEFAULT_SEGMENT_BYTES,
        }
    }
}

/// FNV-1a, 64 bits: a stable hash, the same in every process and version.
pub fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Partitions {
    /// `count` empty partitions (at least one).
    pub fn new(count: usize, retention: Retention) -> Partitions {
        Partitions {
            partitions: (0..count.max(1))
                .map(|_| Arc::new(Partition::new(Log::default(), false)))
                .collect(),
            retention,
            writers: Mutex::new(Vec::new()),
        }
    }

    /// `count` partitions kept in `data`: what it holds is read back (within retention) and
    /// the numbering continues; every appended event is readable once it is durable there.
    /// Call [`Partitions::close`] before the directory is opened again.
    pub fn open(
        count: usize,
        retention: Retention,
        data: &DataDir,
    ) -> Result<Partitions, DiskError> {
        let count = count.max(1);
        disk::check_partition_count(&data.dir, count)?;
        let mut partitions = Vec::with_capacity(count);
        let mut writers = Vec::with_capacity(count);
        for index in 0..count {
            let dir = data.dir.join(index.to_string());
            let mut log = Log::default();
            let segments = SegmentLog::open(&dir, data.segment_bytes, |event| {
                log.restore(event, retention)
            })?;
            let partition = Arc::new(Partition::new(log, true));
            let writer = partition.clone();
            let thread = std::thread::Builder::new()
                .name(format!("hub-sim-log-{index}"))
                .spawn(move || writer.write_loop(segments, retention))
                .map_err(|source| DiskError::Io { path: dir, source })?;
            partitions.push(partition);
            writers.push(thread);
        }
        Ok(Partitions {
            partitions,
            retention,
            writers: Mutex::new(writers),
        })
    }

    /// Writes what is pending and stops the writer threads (blocking; nothing to do without a
    /// data directory). Appends after this are never readable.
    pub fn close(&self) {
        for partition in &self.partitions {
            partition.log.lock().closing = true;
            partition.wake.notify_one();
        }
        for writer in self.writers.lock().drain(..) {
            let _ = writer.join();
        }
    }

    /// The number of partitions.
    pub fn count(&self) -> usize {
        self.partitions.len()
    }

    /// The partition a device's messages go to.
    pub fn partition_of(&self, device_id: &str) -> usize {
        (stable_hash(device_id) % self.partitions.len() as u64) as usize
    }

    /// Enqueues a message in its device's partition; returns the partition and the event.
    pub fn route(&self, message: Incoming) -> (usize, Arc<Event>) {
        let index = self.partition_of(&message.device_id);
        (index, self.append_to(index, message))
    }

    /// Enqueues a message in partition `index` (benches and tests fill partitions directly).
    pub fn append_to(&self, index: usize, message: Incoming) -> Arc<Event> {
        self.partitions[index].append(message, now_ms(), self.retention)
    }

    /// Partition `index`, if it exists.
    pub fn get(&self, index: usize) -> Option<&Partition> {
        self.partitions.get(index).map(|p| &**p)
    }
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: usize, retention: Retention) -> Partitions {
        let parts = Partitions::new(1, retention);
        for i in 0..n {
            parts.append_to(0, Incoming::new("d", format!("m{i}")));
        }
        parts
    }

    #[test]
    fn one_device_always_lands_in_one_partition() {
        let parts = Partitions::new(4, Retention::default());
        let p = parts.partition_of("drone-7");
        for _ in 0..10 {
            assert_eq!(parts.route(Incoming::new("drone-7", "x")).0, p);
        }
        assert_eq!(stable_hash("a"), 0xaf63dc4c8601ec8c);
        let spread: std::collections::HashSet<_> = (0..64)
            .map(|i| parts.partition_of(&format!("d{i}")))
            .collect();
        assert_eq!(spread.len(), 4);
    }

    #[test]
    fn sequence_offsets_and_starting_positions() {
        let parts = filled(5, Retention::default());
        let p = parts.get(0).unwrap();
        let info = p.info();
        assert_eq!(
            (info.begin_sequence_number, info.last_sequence_number),
            (0, 4)
        );
        assert_eq!(info.last_offset, 8);
        assert_eq!(p.resolve(StartAt::Sequence(2)), 2);
        assert_eq!(p.resolve(StartAt::Offset(-1, false)), 0);
        assert_eq!(p.resolve(StartAt::Offset(4, false)), 3);
        assert_eq!(p.resolve(StartAt::Offset(4, true)), 2);
        assert_eq!(p.resolve(StartAt::Latest), 5);
        let mut out = Vec::new();
        p.read(3, 10, &mut out);
        let seqs: Vec<_> = out.iter().map(|e| e.sequence_number).collect();
        assert_eq!(seqs, vec![3, 4]);
    }

    #[test]
    fn retention_drops_the_oldest_by_count_and_bytes() {
        let parts = filled(
            10,
            Retention {
                max_events: 4,
                max_bytes: usize::MAX,
            },
        );
        let info = parts.get(0).unwrap().info();
        assert_eq!((info.begin_sequence_number, info.depth), (6, 4));
        assert_eq!(parts.get(0).unwrap().resolve(StartAt::Sequence(0)), 6);
        let parts = filled(
            10,
            Retention {
                max_events: 100,
                max_bytes: 6,
            },
        );
        assert_eq!(parts.get(0).unwrap().info().depth, 3);
    }

    #[test]
    fn an_empty_partition_reads_as_empty() {
        let info = Partitions::new(2, Retention::default())
            .get(1)
            .unwrap()
            .info();
        assert!(info.is_empty());
        assert_eq!((info.last_sequence_number, info.last_offset), (-1, -1));
    }
}

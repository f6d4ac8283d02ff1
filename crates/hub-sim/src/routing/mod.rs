//! Routing to the built-in endpoint: the partitions of the Event Hubs-compatible stream.
//!
//! Every accepted device message lands in one partition chosen by a stable hash of the device
//! id (FNV-1a, so one device is always in one partition, in its publish order) and gets that
//! partition's next sequence number, its offset (bytes of the partition's stream before it)
//! and the time it was enqueued. Retention drops the oldest events once a partition holds more
//! than a count or a byte budget. Readers wait on a watch of the partition's next sequence
//! number. The partitions know nothing of MQTT or AMQP.

use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::watch;

/// How an event's sender authenticated (`iothub-connection-auth-method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// A SAS token.
    Sas,
    /// An X.509 client certificate registered by thumbprint.
    X509,
    /// Put in through the library API.
    Api,
}

impl AuthMethod {
    /// The JSON IoT Hub puts in `iothub-connection-auth-method`.
    pub fn as_json(self) -> &'static str {
        match self {
            AuthMethod::Sas => {
                r#"{"scope":"device","type":"sas","issuer":"iothub","acceptingIpFilterRule":null}"#
            }
            AuthMethod::X509 => {
                r#"{"scope":"device","type":"x509Certificate","issuer":"iothub","acceptingIpFilterRule":null}"#
            }
            AuthMethod::Api => {
                r#"{"scope":"hub","type":"api","issuer":"iothub","acceptingIpFilterRule":null}"#
            }
        }
    }
}

/// A device message as the hub received it, before it is enqueued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// The authenticated device id.
    pub device_id: Arc<str>,
    /// How the device authenticated.
    pub auth: AuthMethod,
    /// The payload.
    pub body: Bytes,
    /// `$.mid`.
    pub message_id: Option<String>,
    /// `$.cid`.
    pub correlation_id: Option<String>,
    /// `$.uid`.
    pub user_id: Option<String>,
    /// `$.ct`.
    pub content_type: Option<String>,
    /// `$.ce`.
    pub content_encoding: Option<String>,
    /// The property bag's application properties, in order.
    pub properties: Vec<(String, String)>,
}

impl Incoming {
    /// A message with a body only.
    pub fn new(device_id: &str, body: impl Into<Bytes>) -> Incoming {
        Incoming {
            device_id: device_id.into(),
            auth: AuthMethod::Api,
            body: body.into(),
            message_id: None,
            correlation_id: None,
            user_id: None,
            content_type: None,
            content_encoding: None,
            properties: Vec::new(),
        }
    }
}

/// An event in a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The partition's sequence number, from 0.
    pub sequence_number: i64,
    /// Bytes of the partition's stream before this event.
    pub offset: i64,
    /// When it was enqueued, milliseconds since the Unix epoch.
    pub enqueued_ms: i64,
    /// What the device sent.
    pub message: Incoming,
}

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
    events: VecDeque<Arc<Event>>,
    next_sequence: i64,
    next_offset: i64,
    bytes: usize,
    last_enqueued_ms: i64,
}

/// One partition.
#[derive(Debug)]
pub struct Partition {
    log: Mutex<Log>,
    next: watch::Sender<i64>,
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
    fn new() -> Partition {
        Partition {
            log: Mutex::new(Log::default()),
            next: watch::channel(0).0,
        }
    }

    fn append(&self, message: Incoming, now_ms: i64, retention: Retention) -> Arc<Event> {
        let mut log = self.log.lock();
        let len = message.body.len();
        let event = Arc::new(Event {
            sequence_number: log.next_sequence,
            offset: log.next_offset,
            enqueued_ms: now_ms.max(log.last_enqueued_ms),
            message,
        });
        log.next_sequence += 1;
        log.next_offset += len.max(1) as i64;
        log.bytes += len;
        log.last_enqueued_ms = event.enqueued_ms;
        log.events.push_back(event.clone());
        while log.events.len() > retention.max_events
            || (log.bytes > retention.max_bytes && log.events.len() > 1)
        {
            if let Some(old) = log.events.pop_front() {
                log.bytes -= old.message.body.len();
            }
        }
        let next = log.next_sequence;
        drop(log);
        self.next.send_replace(next);
        event
    }

    /// The sequence number the next reader at `start` receives first.
    pub fn resolve(&self, start: StartAt) -> i64 {
        let log = self.log.lock();
        let first_kept = log
            .events
            .front()
            .map_or(log.next_sequence, |e| e.sequence_number);
        let found = |pred: &dyn Fn(&Event) -> bool| {
            log.events
                .iter()
                .find(|e| pred(e))
                .map_or(log.next_sequence, |e| e.sequence_number)
        };
        match start {
            StartAt::Sequence(n) => n.max(first_kept),
            StartAt::Latest => log.next_sequence,
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

    /// A watch of the next sequence number to be assigned.
    pub fn watch(&self) -> watch::Receiver<i64> {
        self.next.subscribe()
    }

    /// What the partition holds now.
    pub fn info(&self) -> PartitionInfo {
        let log = self.log.lock();
        let last = log.events.back();
        PartitionInfo {
            begin_sequence_number: log
                .events
                .front()
                .map_or(log.next_sequence, |e| e.sequence_number),
            last_sequence_number: log.next_sequence - 1,
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
    partitions: Vec<Partition>,
    retention: Retention,
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
            partitions: (0..count.max(1)).map(|_| Partition::new()).collect(),
            retention,
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
        self.partitions.get(index)
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

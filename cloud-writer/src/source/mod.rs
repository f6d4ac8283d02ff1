//! Sources: where messages come from, and how they are acknowledged upstream.
//!
//! Every source yields [`Message`]s (the authenticated device identity, the raw payload,
//! the hub's enqueued time when known) into a queue bounded in bytes ([`queue`]), and acknowledges upstream
//! (MQTT PUBACK, Event Hubs checkpoint) only through the [`Ack`] handle each message
//! carries: the pipeline calls [`Ack::finish`] once the message's outcome is final
//! (written, superseded, or dropped and counted). An [`Ack`] dropped without `finish`
//! (shutdown before the outcome was known) acknowledges nothing, so the message comes
//! back after a restart.
//!
//! Sources acknowledge in order: [`AckQueue`] releases a message's acknowledgement only
//! when it and every earlier message of the same stream (MQTT connection, Event Hubs
//! partition) are final.
//!
//! - this file: the [`Source`] contract, [`Message`], [`Ack`] and [`AckQueue`].
//! - [`queue`]: the queue to the pipeline, bounded in bytes.
//! - [`mqtt`]: the MQTT 5 source.
//! - [`eventhubs`]: the Event Hubs source.

pub mod eventhubs;
pub mod mqtt;
pub mod queue;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use retry_backoff::BackoffConfig;
use tokio_util::sync::CancellationToken;

/// The sources' reconnect backoff: full jitter over a window that doubles from 100 ms to
/// 10 s, reset once a connection works again. The MQTT source waits it between connection
/// attempts, the Event Hubs source between sessions of its processor.
pub const RECONNECT_BACKOFF: BackoffConfig = BackoffConfig {
    base: Duration::from_millis(100),
    cap: Duration::from_secs(10),
};

/// One message as a source received it.
#[derive(Debug)]
pub struct Message {
    /// The device identity the transport authenticated (MQTT topic, IoT Hub
    /// `iothub-connection-device-id`); trusted over the payload's `deviceId`.
    pub identity: String,
    /// The raw payload.
    pub payload: Bytes,
    /// When the hub enqueued the message, if the source knows it.
    pub enqueued_time: Option<DateTime<Utc>>,
    /// When this process received it.
    pub received_at: Instant,
    /// What it carries: positions, or an event IoT Hub routed.
    pub kind: MessageKind,
    /// Acknowledges the message upstream once its outcome is final.
    pub ack: Ack,
}

/// What a message carries (an event's properties boxed: most messages are positions), by IoT Hub's `iothub-message-source` system property. MQTT
/// messages, imported lines and IoT Hub messages without the property are positions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MessageKind {
    /// Positions (`Telemetry`, or no message source).
    #[default]
    Telemetry,
    /// A device connection state event (`deviceConnectionStateEvents`).
    ConnectionState(Box<HubEvent>),
    /// A device twin change event (`twinChangeEvents`).
    TwinChange(Box<HubEvent>),
    /// Any other message source (lifecycle or digital twin events): not stored.
    Other(String),
}

/// The application properties IoT Hub sets on its non-telemetry events
/// ("IoT Hub non-telemetry event schemas").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HubEvent {
    /// `opType`: `deviceConnected`, `deviceDisconnected`, `updateTwin`, `replaceTwin`.
    pub op_type: Option<String>,
    /// `operationTimestamp`: when the operation happened (ISO 8601).
    pub operation_timestamp: Option<String>,
    /// `moduleId`: present when the event is a module's, not the device's.
    pub module_id: Option<String>,
}

impl MessageKind {
    /// The kind of a message whose `iothub-message-source` is `source`; `event` reads the
    /// event's application properties (only for the non-telemetry sources).
    pub fn of_source(source: Option<&str>, event: impl FnOnce() -> HubEvent) -> Self {
        match source {
            None | Some("Telemetry") => MessageKind::Telemetry,
            Some("deviceConnectionStateEvents") => MessageKind::ConnectionState(Box::new(event())),
            Some("twinChangeEvents") => MessageKind::TwinChange(Box::new(event())),
            Some(other) => MessageKind::Other(other.to_owned()),
        }
    }
}

/// Receives the final outcomes of a stream's messages, by position in the stream.
pub trait AckSink: Send + Sync {
    /// Message `index` of the stream is final.
    fn done(&self, index: u64);
}

/// The acknowledgement handle of one message. Cloning it lets several writes (latest and
/// history document) share it: the message is acknowledged when every clone has
/// finished. Dropping any clone without [`Ack::finish`] abandons the acknowledgement.
#[derive(Clone)]
pub struct Ack {
    inner: Option<Arc<AckInner>>,
}

struct AckInner {
    sink: Option<Arc<dyn AckSink>>,
    index: u64,
    abandoned: AtomicBool,
    /// Acknowledgements that wait for this one ([`Ack::carry`]).
    carried: std::sync::Mutex<Vec<Ack>>,
}

impl std::fmt::Debug for Ack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(inner) => write!(f, "Ack({})", inner.index),
            None => f.write_str("Ack(finished)"),
        }
    }
}

impl Ack {
    /// The handle of message `index` of the stream that `sink` acknowledges.
    pub fn new(sink: Arc<dyn AckSink>, index: u64) -> Self {
        Ack {
            inner: Some(Arc::new(AckInner {
                sink: Some(sink),
                index,
                abandoned: AtomicBool::new(false),
                carried: std::sync::Mutex::default(),
            })),
        }
    }

    /// A handle that acknowledges nothing (import, benches).
    pub fn none() -> Self {
        Ack {
            inner: Some(Arc::new(AckInner {
                sink: None,
                index: 0,
                abandoned: AtomicBool::new(false),
                carried: std::sync::Mutex::default(),
            })),
        }
    }

    /// This clone's outcome is final; the last clone to finish acknowledges the message,
    /// then the ones it carries.
    pub fn finish(mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if let Some(inner) = Arc::into_inner(inner) {
            if inner.abandoned.load(Ordering::Acquire) {
                return;
            }
            if let Some(sink) = inner.sink {
                sink.done(inner.index);
            }
            let carried = inner
                .carried
                .into_inner()
                .unwrap_or_else(|e| e.into_inner());
            for ack in carried {
                ack.finish();
            }
        }
    }

    /// Makes `other` wait for this message: it is finished when this one is acknowledged,
    /// and abandoned with it. A share of this same message (two positions of one batch)
    /// is finished at once: this share already holds the message back.
    pub fn carry(&self, other: Ack) {
        let Some(inner) = &self.inner else {
            return;
        };
        if other
            .inner
            .as_ref()
            .is_some_and(|theirs| Arc::ptr_eq(inner, theirs))
        {
            // Carried by itself, the message would never be acknowledged.
            other.finish();
        } else {
            inner
                .carried
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(other);
        }
    }
}

impl Drop for Ack {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            inner.abandoned.store(true, Ordering::Release);
        }
    }
}

/// The in-order acknowledgement queue of one stream: messages enter in stream order
/// with a token (an MQTT packet id, an Event Hubs position); [`AckQueue::complete`]
/// marks one final and returns the tokens now releasable, in order: those of the
/// longest prefix of the stream whose messages are all final.
#[derive(Debug)]
pub struct AckQueue<T> {
    /// Index of the first entry of `pending`.
    first: u64,
    pending: VecDeque<(T, bool)>,
}

impl<T> Default for AckQueue<T> {
    fn default() -> Self {
        AckQueue {
            first: 0,
            pending: VecDeque::new(),
        }
    }
}

impl<T> AckQueue<T> {
    /// Appends the next message of the stream; returns its index.
    pub fn push(&mut self, token: T) -> u64 {
        let index = self.first + self.pending.len() as u64;
        self.pending.push_back((token, false));
        index
    }

    /// Marks message `index` final; returns the tokens released by it, in stream order.
    /// Unknown indices (already released, or from before [`AckQueue::reset`]) are ignored.
    pub fn complete(&mut self, index: u64) -> Vec<T> {
        let Some(offset) = index.checked_sub(self.first) else {
            return Vec::new();
        };
        match self.pending.get_mut(offset as usize) {
            Some(entry) => entry.1 = true,
            None => return Vec::new(),
        }
        let mut released = Vec::new();
        while self.pending.front().is_some_and(|(_, done)| *done) {
            if let Some((token, _)) = self.pending.pop_front() {
                released.push(token);
            }
            self.first += 1;
        }
        released
    }

    /// Messages entered but not yet released (the stream's acknowledgement lag).
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether every entered message has been released.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Forgets every pending message (the stream restarted: they will be delivered
    /// again). Indices keep growing, so handles of forgotten messages release nothing.
    pub fn reset(&mut self) {
        self.first += self.pending.len() as u64;
        self.pending.clear();
    }
}

/// Why a source stopped.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source's settings cannot work; the message says what to fix.
    #[error("source configuration: {0}")]
    Config(String),
    /// The source failed in a way it cannot recover from.
    #[error("source failed: {0}")]
    Failed(String),
}

/// A running source's control: stop taking messages when `stop` fires, then keep
/// acknowledging what finishes until `drained` fires, then disconnect and return.
#[derive(Debug, Clone)]
pub struct SourceControl {
    /// Stop taking new messages.
    pub stop: CancellationToken,
    /// Every taken message's outcome is final: flush acknowledgements and return.
    pub drained: CancellationToken,
}

/// A source of messages.
pub trait Source: Send {
    /// A short name for metrics and logs (`mqtt`, `eventhubs`).
    fn kind(&self) -> &'static str;

    /// Runs until `control` says so or the source fails, sending messages to `tx`.
    fn run(
        self: Box<Self>,
        tx: queue::QueueSender,
        control: SourceControl,
    ) -> BoxFuture<'static, Result<(), SourceError>>;
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<u64>>);

    impl AckSink for Recorder {
        fn done(&self, index: u64) {
            self.0.lock().unwrap().push(index);
        }
    }

    #[test]
    fn queue_releases_longest_final_prefix_in_order() {
        let mut queue = AckQueue::default();
        let ids: Vec<u64> = (0..5).map(|pkid| queue.push(pkid)).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        assert!(queue.complete(2).is_empty());
        assert!(queue.complete(1).is_empty());
        assert_eq!(queue.complete(0), [0, 1, 2]);
        assert_eq!(queue.complete(4), Vec::<u64>::new());
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.complete(3), [3, 4]);
        assert!(queue.is_empty());
        // Completing twice or out of range does nothing.
        assert!(queue.complete(3).is_empty());
        assert!(queue.complete(99).is_empty());
    }

    #[test]
    fn reset_forgets_pending_messages() {
        let mut queue = AckQueue::default();
        let old = queue.push("old");
        queue.reset();
        let new = queue.push("new");
        assert!(queue.complete(old).is_empty());
        assert_eq!(queue.complete(new), ["new"]);
    }

    #[test]
    fn ack_fires_once_all_clones_finish() {
        let recorder = Arc::new(Recorder::default());
        let ack = Ack::new(recorder.clone(), 7);
        let clone = ack.clone();
        ack.finish();
        assert!(recorder.0.lock().unwrap().is_empty());
        clone.finish();
        assert_eq!(*recorder.0.lock().unwrap(), [7]);
    }

    #[test]
    fn dropped_clone_abandons_the_ack() {
        let recorder = Arc::new(Recorder::default());
        let ack = Ack::new(recorder.clone(), 3);
        let clone = ack.clone();
        drop(clone);
        ack.finish();
        assert!(recorder.0.lock().unwrap().is_empty());
        drop(Ack::new(recorder.clone(), 4));
        assert!(recorder.0.lock().unwrap().is_empty());
    }

    #[test]
    fn a_batch_position_superseded_by_another_of_its_batch_waits_for_no_one_else() {
        let recorder = Arc::new(Recorder::default());
        let message = Ack::new(recorder.clone(), 5);
        let (older, newer) = (message.clone(), message.clone());
        message.finish();
        // The newer position of the batch supersedes the older one.
        newer.carry(older.clone());
        older.finish();
        assert!(recorder.0.lock().unwrap().is_empty());
        newer.finish();
        assert_eq!(*recorder.0.lock().unwrap(), [5]);
    }

    #[test]
    fn a_carried_message_is_acknowledged_after_its_carrier() {
        let recorder = Arc::new(Recorder::default());
        let (old, new) = (Ack::new(recorder.clone(), 1), Ack::new(recorder.clone(), 2));
        new.carry(old.clone());
        old.finish();
        assert!(recorder.0.lock().unwrap().is_empty());
        new.finish();
        assert_eq!(*recorder.0.lock().unwrap(), [2, 1]);
    }
}

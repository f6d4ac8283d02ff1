//! The pipeline between source and sink: connection state and twin change events judged
//! apart ([`agent`]) and handed to the sink as agent facts; for positions: decode, identity check, lateness and staleness
//! ([`validate`], which also holds the one staleness rule), rejects counted and dead-lettered ([`reject`]), coalescing per drone
//! within a batch ([`Coalescer`]), at most one write per drone per `MIN_WRITE_INTERVAL`
//! when set ([`spacing`]), then the sink.
//!
//! Batches are whatever the source has delivered when the pipeline is ready for more (up
//! to a maximum), so a quiet stream is written at once and a busy one in large batches.
//!
//! - this file: the batch loop, coalescing, and the hand-off to a sink: the [`Sink`]
//!   contract the pipeline owns (so that it knows nothing of Cosmos DB) and the
//!   [`PositionWrite`] it hands over, which carries its message's acknowledgement until
//!   the write is final.
//! - [`agent`]: connection state and twin change events as agent facts ([`AgentWrite`]).
//! - [`validate`]: a message's positions judged one by one, and the staleness rule, at
//!   intake and again before a late write.
//! - [`reject`]: rejected positions counted and sent to the dead-letter log.
//! - [`dead_letter`]: the dead-letter log's file.
//! - [`spacing`]: at most one write per drone per interval.

pub mod agent;
mod dead_letter;
pub mod reject;
mod spacing;
pub mod validate;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rustc_hash::FxHashMap;
use telemetry::{Position, PositionOrder, StalenessPolicy};

pub use self::agent::AgentWrite;

use self::reject::Rejects;
use self::spacing::{Offer, Spacing};
use crate::metrics::Metrics;
use crate::source::queue::QueueReceiver;
use crate::source::{Ack, Message, MessageKind};

/// Where the pipeline hands its positions: a contract the pipeline owns and a sink
/// implements, so that the pipeline knows nothing of Cosmos DB.
pub trait Sink {
    /// Takes the newest position of a drone in its batch, to write.
    fn write(&self, write: PositionWrite) -> impl Future<Output = ()> + Send;
    /// Takes a position that a newer one of its drone superseded within its batch.
    fn superseded(&self, write: PositionWrite) -> impl Future<Output = ()> + Send;
    /// Takes a fact of a drone's agent (connection state, version), to store.
    fn agent(&self, write: AgentWrite) -> impl Future<Output = ()> + Send;
    /// Nothing more comes: returns when every position taken is final.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// A fresh position on its way to the sink.
#[derive(Debug)]
pub struct PositionWrite {
    /// The position.
    pub position: Position,
    /// The hub's enqueued time, when known.
    pub enqueued: Option<DateTime<Utc>>,
    /// When the message was received.
    pub received_at: Instant,
    /// Acknowledges the message once the write is final.
    pub ack: Ack,
}

/// Something with a drone and a place in that drone's newest-wins order.
pub trait Ordered {
    /// The drone.
    fn device_id(&self) -> &str;
    /// Its place in the drone's order.
    fn order(&self) -> PositionOrder;
}

/// Keeps the newest item per drone of one batch, in order of first appearance.
#[derive(Debug)]
pub struct Coalescer<T> {
    /// Fx rather than SipHash: device ids are authenticated identities and the map is
    /// bounded, so protection against chosen collisions is not worth its cost per message
    /// (a lookup among 10,000 `drone-NNNNN` ids: Fx 7 ns, SipHash 21 ns; release build,
    /// best of 7 rounds of 500,000 lookups). The sink's high-water marks hash the same way.
    index: FxHashMap<String, usize>,
    /// Spare keys of earlier batches, reused so that a batch allocates no key.
    spare_keys: Vec<String>,
    winners: Vec<T>,
}

impl<T> Default for Coalescer<T> {
    fn default() -> Self {
        Coalescer {
            index: FxHashMap::default(),
            spare_keys: Vec::new(),
            winners: Vec::new(),
        }
    }
}

impl<T: Ordered> Coalescer<T> {
    /// Offers an item; returns the item it superseded, or itself if an item at least as
    /// new is already kept (an equal order is a replay and does not replace).
    pub fn offer(&mut self, item: T) -> Option<T> {
        if let Some(&i) = self.index.get(item.device_id()) {
            let kept = &mut self.winners[i];
            return if item.order().is_newer_than(kept.order()) {
                Some(std::mem::replace(kept, item))
            } else {
                Some(item)
            };
        }
        let mut key = self.spare_keys.pop().unwrap_or_default();
        key.clear();
        key.push_str(item.device_id());
        self.index.insert(key, self.winners.len());
        self.winners.push(item);
        None
    }

    /// The item kept for drone `device`.
    pub fn kept(&self, device: &str) -> Option<&T> {
        self.index.get(device).map(|&i| &self.winners[i])
    }

    #[cfg(feature = "test-support")]
    /// Number of drones kept.
    pub fn len(&self) -> usize {
        self.winners.len()
    }

    #[cfg(feature = "test-support")]
    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.winners.is_empty()
    }

    /// Takes the kept items, leaving the coalescer empty for the next batch.
    pub fn drain(&mut self) -> std::vec::Drain<'_, T> {
        self.spare_keys
            .extend(self.index.drain().map(|(key, _)| key));
        self.winners.drain(..)
    }
}

impl Ordered for PositionWrite {
    fn device_id(&self) -> &str {
        &self.position.device_id
    }

    fn order(&self) -> PositionOrder {
        self.position.order()
    }
}

/// Settings of the pipeline.
#[derive(Debug, Clone)]
pub struct PipelineSettings {
    /// The staleness rule.
    pub staleness: StalenessPolicy,
    /// Most messages per batch.
    pub batch_max_messages: usize,
    /// The byte budget of the queue from the source ([`crate::source::queue`]).
    pub queue_max_bytes: usize,
    /// At most one write per drone per this interval; zero: every drone's newest position
    /// of each batch is written.
    pub min_write_interval: Duration,
}

/// Judges and coalesces one batch of messages, position by position (a message may be a
/// batch of one drone's positions): rejected positions are recorded, superseded ones
/// collected in `superseded` (acknowledged when the position that superseded them is
/// final); the newest fresh position of each drone stays in `coalescer`. A message is
/// acknowledged when every position it carries is final. Connection state and twin
/// change events become agent facts in `agents` (each orders itself on the server, so
/// none supersedes another here), or are rejected.
#[allow(clippy::too_many_arguments)]
pub fn prepare_batch(
    messages: impl IntoIterator<Item = Message>,
    now: DateTime<Utc>,
    policy: &StalenessPolicy,
    rejects: &Rejects,
    metrics: &Metrics,
    coalescer: &mut Coalescer<PositionWrite>,
    superseded: &mut Vec<PositionWrite>,
    agents: &mut Vec<AgentWrite>,
) {
    for message in messages {
        let Message {
            identity,
            payload,
            enqueued_time,
            received_at,
            kind,
            ack,
        } = message;
        if kind != MessageKind::Telemetry {
            match agent::judge(&kind, &payload) {
                Ok(Some(fact)) => agents.push(AgentWrite {
                    device_id: identity,
                    fact,
                    ack,
                }),
                Ok(None) => {
                    tracing::debug!(device = %identity, "twin change without the agent's version");
                    ack.finish();
                }
                Err(rejection) => {
                    rejects.record(&identity, &payload, &rejection);
                    ack.finish();
                }
            }
            continue;
        }
        let verdicts = validate::judge(&identity, &payload, enqueued_time, now, policy);
        metrics.positions_received(verdicts.len());
        for verdict in verdicts {
            // One share of the message's acknowledgement per position.
            let ack = ack.clone();
            match verdict {
                Ok(accepted) => {
                    let write = PositionWrite {
                        position: accepted.position,
                        enqueued: accepted.enqueued,
                        received_at,
                        ack,
                    };
                    if let Some(loser) = coalescer.offer(write) {
                        // Acknowledged when the position that superseded it is final.
                        let winner = coalescer.kept(loser.device_id()).expect("kept");
                        winner.ack.carry(loser.ack.clone());
                        superseded.push(loser);
                    }
                }
                Err(rejection) => {
                    rejects.record(&identity, &payload, &rejection);
                    ack.finish();
                }
            }
        }
        ack.finish();
    }
}

/// Runs the pipeline until the source's channel closes, then writes the positions held
/// for their drone's interval and waits for every write.
pub async fn run(
    mut rx: QueueReceiver,
    sink: impl Sink,
    settings: PipelineSettings,
    rejects: Rejects,
    metrics: Arc<Metrics>,
) {
    let mut batch = Vec::with_capacity(settings.batch_max_messages);
    let mut coalescer = Coalescer::default();
    let mut superseded = Vec::new();
    let mut agents = Vec::new();
    let mut spacing =
        (!settings.min_write_interval.is_zero()).then(|| Spacing::new(settings.min_write_interval));
    loop {
        let due = spacing.as_ref().and_then(Spacing::next_due);
        // Cancel-safe: a batch is either taken whole or not at all.
        let received = tokio::select! {
            n = rx.recv_many(&mut batch, settings.batch_max_messages) => Some(n),
            () = sleep_until(due) => None,
        };
        if received == Some(0) {
            break;
        }
        if received.is_some() {
            metrics.set_backlog(rx.len());
            prepare_batch(
                batch.drain(..),
                Utc::now(),
                &settings.staleness,
                &rejects,
                &metrics,
                &mut coalescer,
                &mut superseded,
                &mut agents,
            );
            rejects.flush();
            for write in agents.drain(..) {
                sink.agent(write).await;
            }
            for write in superseded.drain(..) {
                sink.superseded(write).await;
            }
            let now = tokio::time::Instant::now();
            for write in coalescer.drain() {
                let offer = match spacing.as_mut() {
                    Some(spacing) => spacing.offer(write, now),
                    None => Offer::Write(write),
                };
                match offer {
                    Offer::Write(write) => sink.write(write).await,
                    Offer::Held => {}
                    Offer::Superseded(write) => sink.superseded(write).await,
                }
            }
        }
        if let Some(spacing) = spacing.as_mut() {
            for write in spacing.take_due(tokio::time::Instant::now()) {
                sink.write(write).await;
            }
        }
    }
    for write in spacing.iter_mut().flat_map(Spacing::drain) {
        sink.write(write).await;
    }
    metrics.set_backlog(0);
    sink.close().await;
}

/// Waits until `due`, or forever.
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Item(String, i64, u64);

    impl Ordered for Item {
        fn device_id(&self) -> &str {
            &self.0
        }
        fn order(&self) -> PositionOrder {
            PositionOrder {
                device_time_ms: self.1,
                seq: self.2,
            }
        }
    }

    #[test]
    fn newest_wins_in_any_arrival_order() {
        let mut c = Coalescer::default();
        assert_eq!(c.offer(Item("a".into(), 10, 1)), None);
        assert_eq!(
            c.offer(Item("a".into(), 30, 3)),
            Some(Item("a".into(), 10, 1))
        );
        assert_eq!(
            c.offer(Item("a".into(), 20, 2)),
            Some(Item("a".into(), 20, 2))
        );
        assert_eq!(
            c.offer(Item("a".into(), 30, 3)),
            Some(Item("a".into(), 30, 3))
        );
        assert_eq!(c.offer(Item("b".into(), 5, 1)), None);
        let kept: Vec<Item> = c.drain().collect();
        assert_eq!(kept, [Item("a".into(), 30, 3), Item("b".into(), 5, 1)]);
        assert!(c.is_empty());
    }

    proptest! {
        #[test]
        fn keeps_the_maximum_of_each_drone(items in proptest::collection::vec((0u8..5, 0i64..50, 0u64..5), 1..60)) {
            let mut c = Coalescer::default();
            let mut superseded = 0;
            for (d, t, s) in &items {
                superseded += usize::from(c.offer(Item(d.to_string(), *t, *s)).is_some());
            }
            prop_assert_eq!(superseded + c.len(), items.len());
            for kept in c.drain() {
                let max = items.iter().filter(|(d, ..)| d.to_string() == kept.0).map(|(_, t, s)| (*t, *s)).max().unwrap();
                prop_assert_eq!((kept.1, kept.2), max);
            }
        }
    }
}

//! The pipeline between source and sink: connection state and twin change events judged
//! apart ([`agent`]) and handed to the sink as agent facts; for positions: decode, identity check, lateness and staleness
//! ([`validate`], by the one staleness rule of [`staleness`]), rejects counted and dead-lettered ([`reject`]), coalescing per drone
//! within a batch ([`coalesce`]), at most one write per drone per `MIN_WRITE_INTERVAL`
//! when set ([`spacing`]), then the sink.
//!
//! Batches are whatever the source has delivered when the pipeline is ready for more (up
//! to a maximum), so a quiet stream is written at once and a busy one in large batches.

pub mod agent;
pub mod coalesce;
mod dead_letter;
mod handoff;
pub mod reject;
mod spacing;
pub mod staleness;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use telemetry::{PositionOrder, StalenessPolicy};

pub use self::agent::AgentWrite;
pub use self::handoff::{PositionWrite, Sink};

use self::coalesce::{Coalescer, Ordered};
use self::reject::Rejects;
use self::spacing::{Offer, Spacing};
use crate::metrics::Metrics;
use crate::source::queue::QueueReceiver;
use crate::source::{Message, MessageKind};

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

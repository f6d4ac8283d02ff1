//! The pipeline between source and sink: decode, identity check, lateness and staleness
//! ([`validate`], by the one staleness rule of [`staleness`]), rejects counted and dead-lettered ([`reject`]), coalescing per drone
//! within a batch ([`coalesce`]), then the sink.
//!
//! Batches are whatever the source has delivered when the pipeline is ready for more (up
//! to a maximum), so a quiet stream is written at once and a busy one in large batches.

pub mod coalesce;
mod handoff;
pub mod reject;
pub mod staleness;
pub mod validate;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use telemetry::{PositionOrder, StalenessPolicy};

pub use self::handoff::{PositionWrite, Sink};

use self::coalesce::{Coalescer, Ordered};
use self::reject::Rejects;
use crate::metrics::Metrics;
use crate::source::Message;
use crate::source::queue::QueueReceiver;

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
}

/// Judges and coalesces one batch of messages: rejected ones are recorded and
/// acknowledged, superseded ones collected in `superseded`; the newest fresh position of
/// each drone stays in `coalescer`.
pub fn prepare_batch(
    messages: impl IntoIterator<Item = Message>,
    now: DateTime<Utc>,
    policy: &StalenessPolicy,
    rejects: &Rejects,
    coalescer: &mut Coalescer<PositionWrite>,
    superseded: &mut Vec<PositionWrite>,
) {
    for message in messages {
        let Message {
            identity,
            payload,
            enqueued_time,
            received_at,
            ack,
        } = message;
        match validate::judge(&identity, &payload, enqueued_time, now, policy) {
            Ok(accepted) => {
                let write = PositionWrite {
                    position: accepted.position,
                    enqueued: enqueued_time,
                    received_at,
                    ack,
                };
                superseded.extend(coalescer.offer(write));
            }
            Err(rejection) => {
                rejects.record(&identity, &payload, &rejection);
                ack.finish();
            }
        }
    }
}

/// Runs the pipeline until the source's channel closes, then waits for every write.
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
    while rx.recv_many(&mut batch, settings.batch_max_messages).await > 0 {
        metrics.set_backlog(rx.len());
        prepare_batch(
            batch.drain(..),
            Utc::now(),
            &settings.staleness,
            &rejects,
            &mut coalescer,
            &mut superseded,
        );
        rejects.flush();
        for write in superseded.drain(..) {
            sink.superseded(write).await;
        }
        for write in coalescer.drain() {
            sink.write(write).await;
        }
    }
    metrics.set_backlog(0);
    sink.close().await;
}

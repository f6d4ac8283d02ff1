//! The Cosmos DB sink: turns coalesced positions into bulk operations and drives each
//! to a final outcome under the newest-wins rule.
//!
//! # Newest wins
//! The server decides, so the rule holds across batches in flight together, replicas and
//! restarts:
//! - [`NewestWins::Patch`](crate::config::NewestWins::Patch): a Patch of the drone's document with the condition "stored
//!   position older than this one" (`deviceTimeMs`, then `seq`). 200: written;
//!   412: superseded (final); 404: Create the full document; a Create answered 409 (another
//!   write created it meanwhile) goes back to the conditional Patch.
//! - [`NewestWins::Etag`](crate::config::NewestWins::Etag): read the stored document's order and ETag (or use the ETag
//!   this writer last wrote), compare orders in memory, Replace with `ifMatch` (Create
//!   when absent); 412 or 409 read again. For servers without Patch in batches.
//!
//! A drone this process has not written yet (no high-water mark) starts with the Create:
//! a new document then costs one operation instead of a Patch answered 404 and a Create
//! (an import or the first minute of a fleet), and an existing one answers 409, after
//! which the position goes on as above. A Create never replaces anything, so the order
//! of the attempts does not weaken the rule.
//!
//! A per-drone high-water mark ([`HighWater`]) skips positions already known superseded.
//!
//! # Refusals
//! Every answer that is not the state machine's business is classified
//! ([`refusal`]): throttling past the retry budget is submitted again; a refusal of
//! the document alone (too large, malformed) is dead-lettered and counted; a refusal that
//! would hit every write (authorization, missing container, unsupported operation, outage)
//! parks the position and holds the stream ([`hold`]) until a probe gets through,
//! then every parked position is sent again. A resubmitted Replace keeps its `ifMatch`. A
//! position that turns stale while retried or parked
//! ([`crate::pipeline::validate::still_fresh`]) is dropped from the latest document as
//! `stale_in_retry`; its track segment keeps it. Track segments go through the same bulk
//! writer, classification and hold.
//! Every position ends written, superseded, stale or refused (counted), and only then is
//! its message acknowledged. Positions count against the in-flight limit from the moment
//! the sink takes them, reads and parked ones included.
//!
//! Everything of the sink lives in this folder: its settings (`settings`), the bytes
//! ([`encode`]), the newest-wins state machine (`newest_wins`, no I/O), what is in flight
//! (`in_flight`), the write engine (`engine`: every write's
//! steps, from its first operation to its final outcome, and its outcome task),
//! the agent facts' documents (`agent`), what is known stored ([`high_water`]),
//! the ETag mode's read (`read`), what a refusal means ([`refusal`]), the hold ([`hold`])
//! and what it parks (`parked`), and history: positions held per drone and stretch
//! (`segments`, no I/O) and written as one bulk operation per segment and flush
//! (`segment_write`). Beside the path: what the container's indexing policy makes a
//! position cost, for `cloud-writer check` (`indexing`).
//!
//! # History
//! With `HISTORY=true` every fresh position, superseded ones included, is held for its
//! track segment and its message stays unacknowledged until that segment write is final.
//! Holding costs in-flight messages (drones × `HISTORY_HOLD` ÷ report interval; MQTT's
//! Receive Maximum must allow them) and checkpoint lag (up to `HISTORY_HOLD`; a restart
//! reads that much again and merges it by `seq`). An import writes each segment once:
//! 0.06 RU and 60 bytes per position, against 4.96 RU and 474 bytes for a document per
//! position.

use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use cosmos::ContainerClient;
use telemetry::document::{SegmentPoint, document_id};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

use crate::metrics::{DropReason, Metrics};
use crate::pipeline::reject::Rejects;
use crate::pipeline::{AgentWrite, PositionWrite, Sink};

mod agent;
pub mod encode;
mod engine;
pub mod high_water;
pub mod hold;
mod in_flight;
mod indexing;
mod newest_wins;
mod parked;
mod read;
pub mod refusal;
mod segment_write;
mod segments;
mod settings;

pub use encode::{Encoder, HistoryFormat};
use engine::{WriteEngine, outcome_loop};
use high_water::HighWater;
use hold::Hold;
use in_flight::{Ctx, Pending};
pub use indexing::policy_cost;
use newest_wins::{First, Step};
use read::{MAX_READS, read_query};
use segments::Segments;
pub use settings::SinkSettings;

/// The sink. Feed it with [`CosmosSink::write`]; [`CosmosSink::close`] waits for every
/// position's final outcome.
pub struct CosmosSink {
    engine: Arc<WriteEngine>,
    outcomes: JoinHandle<()>,
    supervisor: JoinHandle<()>,
    /// Writes held stretches when they are due (history only).
    flusher: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for CosmosSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CosmosSink")
            .field("in_flight", &self.engine.in_flight.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Drop for CosmosSink {
    /// A sink dropped without [`CosmosSink::close`] (the writer stopped while holding the
    /// stream) stops probing; what it parked is never acknowledged.
    fn drop(&mut self) {
        self.supervisor.abort();
        if let Some(flusher) = &self.flusher {
            flusher.abort();
        }
    }
}

impl CosmosSink {
    /// Starts the sink's bulk writer, outcome task and hold supervisor on `container`;
    /// documents Cosmos DB refuses go to `rejects`.
    pub fn start(
        container: ContainerClient,
        encoder: Encoder,
        settings: SinkSettings,
        metrics: Arc<Metrics>,
        rejects: Rejects,
    ) -> CosmosSink {
        let (writer, outcomes) = container.bulk_writer::<Ctx>(settings.bulk.clone());
        let hold = Arc::new(Hold::new(metrics.clone()));
        let history = encoder.history();
        let segments = Segments::new(
            history.map_or(std::time::Duration::from_secs(300), |h| h.span),
            settings.segment_hold,
            settings.high_water_capacity,
        );
        let engine = Arc::new(WriteEngine {
            writer,
            container,
            high_water: Mutex::new(HighWater::new(settings.high_water_capacity)),
            read_query: read_query(encoder.layout().partition_key_path()),
            encoder,
            slots: Semaphore::new(settings.bulk.queue_capacity.max(1)),
            settings,
            metrics,
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            reads: Semaphore::new(MAX_READS),
            hold: hold.clone(),
            rejects,
            segments: Mutex::new(segments),
        });
        let outcomes = tokio::spawn(outcome_loop(engine.clone(), outcomes));
        let supervisor = tokio::spawn(hold.supervise(engine.clone()));
        let flusher = history.map(|_| tokio::spawn(flush_due(engine.clone())));
        CosmosSink {
            engine,
            outcomes,
            supervisor,
            flusher,
        }
    }

    #[cfg(feature = "test-support")]
    /// Positions and segment writes not yet final.
    pub fn in_flight(&self) -> usize {
        self.engine.in_flight.load(Ordering::Acquire)
    }

    /// Starts writing one coalesced position; waits while the stream is held or the
    /// in-flight limit is reached. A position that turned stale since the pipeline judged
    /// it (its batch waited while the stream was held) is dropped as `stale_in_retry` from
    /// the latest document; history still keeps it.
    pub async fn write(&self, item: PositionWrite) {
        let engine = &self.engine;
        engine.hold.wait_open().await;
        if !engine.is_fresh(item.position.ts, item.enqueued) {
            engine.metrics.dropped(DropReason::StaleInRetry);
            if engine.encoder.history().is_some() {
                return self.hold_for_segment(&item.position, item.ack).await;
            }
            return item.ack.finish();
        }
        let order = item.position.order();
        let first = {
            let mut hw = engine.high_water.lock().unwrap_or_else(|e| e.into_inner());
            let mark = hw.get(&item.position.device_id);
            newest_wins::first(mark, order, engine.settings.newest_wins)
        };
        let Some(first) = first else {
            return self.superseded(item).await;
        };
        let PositionWrite {
            position,
            enqueued,
            received_at,
            ack,
        } = item;
        if engine.encoder.history().is_some() {
            self.hold_for_segment(&position, ack.clone()).await;
        }
        engine.enter().await;
        let mut pending = Box::new(Pending {
            doc_id: document_id(&position.device_id).into_owned(),
            position,
            order,
            enqueued,
            received_at,
            latest: None,
            patch: None,
            if_match: None,
            probe: false,
            ack,
            rounds: 0,
        });
        match first {
            First::Create => engine.submit(engine.op(pending, Step::Create)).await,
            First::Patch => engine.submit(engine.op(pending, Step::Patch)).await,
            First::Replace(etag) => {
                pending.if_match = Some(etag);
                engine.submit(engine.op(pending, Step::Replace)).await;
            }
            First::Read => engine.clone().read_then_write(pending),
        }
    }

    /// A fresh position known to be superseded (by a newer one of its batch, or by the
    /// high-water mark): counted; in history mode it is still held for its segment.
    pub async fn superseded(&self, item: PositionWrite) {
        self.engine.metrics.dropped(DropReason::Superseded);
        if self.engine.encoder.history().is_some() {
            self.hold_for_segment(&item.position, item.ack).await;
        } else {
            item.ack.finish();
        }
    }

    /// Starts writing an agent fact (connection state, version) onto its drone's latest
    /// document ([`agent`]); waits while the stream is held or the in-flight limit is reached.
    pub async fn agent(&self, write: AgentWrite) {
        self.engine.hold.wait_open().await;
        self.engine.write_agent(write).await;
    }

    /// Holds a position for its track segment ([`segments`]); writes the drone's earlier
    /// stretches, due now.
    async fn hold_for_segment(&self, position: &telemetry::Position, ack: crate::source::Ack) {
        let due = self.engine.segments().hold(
            &position.device_id,
            SegmentPoint::from(position),
            ack,
            tokio::time::Instant::now(),
        );
        self.engine.write_segments(due).await;
    }

    /// Waits until every position written so far has its final outcome, then stops the
    /// bulk writer.
    pub async fn close(mut self) {
        if let Some(flusher) = self.flusher.take() {
            flusher.abort();
        }
        let held = self.engine.segments().take_all();
        self.engine.write_segments(held).await;
        self.engine.wait_idle().await;
        self.supervisor.abort();
        self.engine.writer.clone().close().await;
        let _ = (&mut self.outcomes).await;
    }

    #[cfg(feature = "test-support")]
    /// Waits until nothing is in flight (everything submitted so far is final).
    pub async fn wait_idle(&self) {
        self.engine.wait_idle().await;
    }
}

impl Sink for CosmosSink {
    fn write(&self, write: PositionWrite) -> impl Future<Output = ()> + Send {
        CosmosSink::write(self, write)
    }

    fn superseded(&self, write: PositionWrite) -> impl Future<Output = ()> + Send {
        CosmosSink::superseded(self, write)
    }

    fn agent(&self, write: AgentWrite) -> impl Future<Output = ()> + Send {
        CosmosSink::agent(self, write)
    }

    fn close(self) -> impl Future<Output = ()> + Send {
        CosmosSink::close(self)
    }
}

/// Writes held stretches as they fall due: checks a quarter of the hold (at least every
/// 50 ms, at most every second).
async fn flush_due(engine: Arc<WriteEngine>) {
    let every = (engine.settings.segment_hold / 4).clamp(
        std::time::Duration::from_millis(50),
        std::time::Duration::from_secs(1),
    );
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let due = engine.segments().due(tokio::time::Instant::now());
        engine.write_segments(due).await;
    }
}

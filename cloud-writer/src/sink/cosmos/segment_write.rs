//! Writing a held stretch into its track segment (`telemetry::document::segment`) through
//! the bulk writer, like every other write of the sink, until the write is final; only
//! then are its messages acknowledged.
//!
//! - Known segment (this writer stored it last): Replace with `ifMatch`, the held points
//!   merged by `seq` into the stored ones.
//! - Unknown: Create with the held points. 409 (it exists: a replay, a restart, another
//!   writer), 412 (changed since) or 404 (gone): point-read it, merge, write again.
//! - Nothing new after the merge (a replay): no write.
//! - Answers are classified as a position's are ([`super::refusal`]): throttled past the
//!   retry budget, submitted again; a refusal of every write (outage, timeout, key,
//!   container) parks the segment with the stream's hold ([`super::hold`]) and is
//!   reported there; it is written again once a probe passes. A segment never turns
//!   stale: staleness is the latest document's rule, not the track's. Only a refusal of
//!   the document alone is counted in `history_dropped_total{reason}` and dead-lettered.
//! - Its request units count in `cosmos_request_units_total{kind="history"}`, reads
//!   after a conflict included.
//!
//! # Why the bulk writer
//! A segment is one operation per stretch and flush, few beside the latest documents, so
//! sending each alone cost little in requests. Sending them as bulk operations costs
//! nothing more (per-operation `ifMatch` keeps a Replace conditional) and gives them what
//! the latest documents have: batches per partition key range, the throttling budget,
//! the hold, and the range's RU in the heat map. The conflict's point read stays a single
//! request: a batch answer carries no document. Measured on an import of 20 drones x 120
//! positions (debug build, local endpoint): the same 0.335 RU per position in 120
//! segments as single requests, and the writer's CPU no higher (noisy on a shared host).
//!
//! Cost (Microsoft's size table): a write is charged for the old and the new size, about
//! 5 RU per KB step up to 16 KB and steeply past 32 KB; the segment adds five indexed terms
//! (`id`'s, `deviceId`, `kind`, `startMs`, `endMs`) once, and a Replace changes only `_ts`.
//! Read+Replace with `ifMatch` costs less than a conditional Patch here: a Patch is charged
//! the same sizes plus 0.4 RU per modified term, and cannot merge by `seq`. A point read
//! (1 RU per KB) is spent only on a conflict or a stretch this writer does not know.

use std::sync::Arc;

use bytes::Bytes;
use cosmos::{BulkOperation, CosmosError, OperationType};
use telemetry::document::{SegmentPoint, segment_id, stored_points};

use super::engine::WriteEngine;
use super::in_flight::{Ctx, OutcomeInfo, Parked, SegmentPending};
use super::newest_wins::{self, Step};
use super::read::READ_RETRY_PAUSE;
use super::refusal::{self, Refusal};
use super::segments::{Held, StretchKey, merged};
use crate::metrics::{DocumentKind, DropReason};

impl WriteEngine {
    /// Writes held stretches, each as its own operation, inside the in-flight limit
    /// (waiting while the stream is held).
    pub(super) async fn write_segments(self: &Arc<Self>, due: Vec<(StretchKey, Held)>) {
        for (key, held) in due {
            self.enter().await;
            let pending = Box::new(SegmentPending {
                key,
                held,
                read_first: false,
                sent: Vec::new(),
                added: 0,
                probe: false,
                rounds: 0,
            });
            self.send_segment(pending).await;
        }
    }

    /// Sends a segment's next write, after reading the stored segment when a conflict
    /// asked for it.
    pub(super) async fn send_segment(self: &Arc<Self>, pending: Box<SegmentPending>) {
        if pending.read_first {
            self.clone().read_then_send(pending);
        } else {
            self.submit_segment(pending).await;
        }
    }

    /// Submits the Create or Replace of the held points merged into what is known stored;
    /// final at once when nothing is new.
    async fn submit_segment(&self, mut pending: Box<SegmentPending>) {
        let stored = self.segments().stored(&pending.key);
        let (step, if_match, (points, added)) = match stored {
            Some(stored) => (
                Step::Replace,
                Some(stored.etag),
                merged(&stored.points, &pending.held.points),
            ),
            None => (Step::Create, None, merged(&[], &pending.held.points)),
        };
        if added == 0 {
            // A replay: no request, so a probe learns nothing from it.
            self.unanswered(&mut pending.probe);
            return self.finish_segment(*pending);
        }
        let key = &pending.key;
        let (kind, id) = match step {
            Step::Replace => (
                OperationType::Replace,
                Some(segment_id(&key.device_id, key.start_ms)),
            ),
            _ => (OperationType::Create, None),
        };
        let partition_key = self.encoder.partition_key(&key.device_id);
        let body = self.segment_body(key, &points);
        pending.sent = points;
        pending.added = added;
        let op = BulkOperation {
            kind,
            partition_key,
            id,
            body,
            if_match,
            context: Ctx::Segment(pending, step),
        };
        self.submit(op).await;
    }

    /// Handles one outcome of a segment's Create or Replace.
    pub(super) async fn on_segment(
        self: &Arc<Self>,
        mut pending: Box<SegmentPending>,
        step: Step,
        outcome: OutcomeInfo,
    ) {
        match self.classify(step, &outcome, &mut pending.probe) {
            Refusal::Hold(cause) => return self.park(Parked::Segment(pending), cause),
            Refusal::Again => return self.submit_segment(pending).await,
            Refusal::Document(reason) => {
                let detail = format!("Cosmos DB refused the track segment of {}", id(&pending));
                return self.refuse_segment(pending, reason, detail);
            }
            Refusal::None => {}
        }
        let status = outcome.status;
        match status {
            200 | 201 => {
                self.metrics.history_written(pending.added as u64);
                let sent = std::mem::take(&mut pending.sent);
                self.segments()
                    .remember(&pending.key, outcome.etag.map(|etag| (etag, sent)));
                self.finish_segment(*pending);
            }
            404 | 409 | 412 if newest_wins::take_round(&mut pending.rounds) => {
                pending.read_first = true;
                self.clone().read_then_send(pending);
            }
            _ => {
                tracing::error!(id = %id(&pending), ?step, status, error = ?outcome.error, "track segment write rejected by Cosmos DB");
                let detail = format!("the track segment {} answered {status}", id(&pending));
                self.refuse_segment(pending, DropReason::WriteFailed, detail);
            }
        }
    }

    /// Reads the stored segment into what this writer knows, then writes: a refusal of
    /// every write parks it, throttling reads again after a pause.
    fn read_then_send(self: Arc<Self>, mut pending: Box<SegmentPending>) {
        tokio::spawn(async move {
            loop {
                let read = {
                    let _permit = self.reads.acquire().await;
                    self.read_segment(&pending.key).await
                };
                match read {
                    Ok(()) => {
                        self.answered(&mut pending.probe);
                        pending.read_first = false;
                        return self.submit_segment(pending).await;
                    }
                    Err((Refusal::Hold(cause), _)) => {
                        return self.park(Parked::Segment(pending), cause);
                    }
                    Err((Refusal::Document(reason), detail)) => {
                        self.answered(&mut pending.probe);
                        return self.refuse_segment(pending, reason, detail);
                    }
                    Err((Refusal::Again | Refusal::None, _)) => {
                        self.answered(&mut pending.probe);
                        tokio::time::sleep(READ_RETRY_PAUSE).await;
                    }
                }
            }
        });
    }

    /// Point-reads the stored segment into what this writer knows; its RU are counted.
    async fn read_segment(&self, key: &StretchKey) -> Result<(), (Refusal, String)> {
        let id = segment_id(&key.device_id, key.start_ms);
        let pk = self.encoder.partition_key(&key.device_id);
        let read = self.container.read(pk.clone(), &id).await;
        let charge = match &read {
            Ok(read) => read.as_ref().map_or(0.0, |r| r.request_charge),
            Err(CosmosError::Service(e)) => e.request_charge,
            Err(_) => 0.0,
        };
        if charge > 0.0
            && let Ok(ranges) = self.container.range_map().await
        {
            let range = &ranges.range_of_key(&pk).id;
            self.metrics
                .request_units(range, DocumentKind::History, charge);
        }
        let refused = |reason, detail: String| (Refusal::Document(reason), detail);
        let known = match read {
            Err(err) => {
                let detail = format!("reading the track segment {id}: {err}");
                return Err((refusal::of_error(&err), detail));
            }
            Ok(None) => None,
            Ok(Some(read)) => {
                let doc: serde_json::Value = serde_json::from_slice(&read.body).map_err(|e| {
                    refused(
                        DropReason::DocumentRefused,
                        format!("the stored segment {id} is not JSON: {e}"),
                    )
                })?;
                let points = stored_points(&doc).map_err(|e| {
                    refused(
                        DropReason::DocumentRefused,
                        format!("the stored segment {id}: {e}"),
                    )
                })?;
                let etag = read
                    .etag
                    .or_else(|| doc["_etag"].as_str().map(str::to_owned));
                etag.map(|etag| (etag, points))
            }
        };
        self.segments().remember(key, known);
        Ok(())
    }

    fn segment_body(&self, key: &StretchKey, points: &[SegmentPoint]) -> Bytes {
        let stretch = self.segments().stretch(key);
        self.encoder.segment(&key.device_id, stretch, points)
    }

    /// The document alone is refused: its points counted in `history_dropped` and
    /// dead-lettered, its messages acknowledged.
    fn refuse_segment(&self, pending: Box<SegmentPending>, reason: DropReason, detail: String) {
        for _ in &pending.held.points {
            self.metrics.history_dropped(reason);
        }
        tracing::warn!(id = %id(&pending), reason = reason.as_str(), %detail, "track segment not written");
        let body = self.segment_body(&pending.key, &pending.held.points);
        self.rejects
            .record_refused(&pending.key.device_id, reason, detail, &body);
        self.finish_segment(*pending);
    }

    /// The write is final: its messages are acknowledged.
    fn finish_segment(&self, pending: SegmentPending) {
        for ack in pending.held.acks {
            ack.finish();
        }
        self.leave();
    }
}

fn id(pending: &SegmentPending) -> String {
    segment_id(&pending.key.device_id, pending.key.start_ms)
}

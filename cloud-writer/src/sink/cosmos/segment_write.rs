//! Writing a held stretch into its track segment (`telemetry::document::segment`), one
//! request per stretch and flush, until the write is final; only then are its messages
//! acknowledged.
//!
//! - Known segment (this writer stored it last): Replace with `ifMatch`, the held points
//!   merged by `seq` into the stored ones.
//! - Unknown: Create with the held points. 409 (it exists: a replay, a restart, another
//!   writer) or 412 (changed since): point-read it, merge, Replace with its ETag.
//! - Nothing new after the merge (a replay): no write.
//! - Throttled or a refusal of every write: the same write again after a pause (the
//!   positions stay held, their messages unacknowledged). A refusal of the document
//!   alone: counted in `history_dropped_total{reason}` and dead-lettered.
//!
//! Cost (Microsoft's size table): a write is charged for the old and the new size, about
//! 5 RU per KB step up to 16 KB and steeply past 32 KB; the segment adds five indexed terms
//! (`id`'s, `deviceId`, `kind`, `startMs`, `endMs`) once, and a Replace changes only `_ts`.
//! Read+Replace with `ifMatch` costs less than a conditional Patch here: a Patch is charged
//! the same sizes plus 0.4 RU per modified term, and cannot merge by `seq`. A point read
//! (1 RU per KB) is spent only on a conflict or a stretch this writer does not know.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cosmos::CosmosError;
use telemetry::document::{segment_id, stored_points};

use super::engine::WriteEngine;
use super::refusal::{self, Refusal};
use super::segments::{Held, StretchKey, merged};
use crate::metrics::DropReason;

/// Pause before a segment write is sent again after throttling or a refusal of every write.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// What one attempt of a segment write came to.
enum Attempt {
    /// Written (or nothing new to write): final.
    Done,
    /// Conflict: read the stored segment, then write again.
    Read,
    /// Send again after a pause.
    Again,
    /// The document itself is refused: final.
    Refused(DropReason, String),
}

impl WriteEngine {
    /// Writes held stretches, each in its own task, inside the in-flight limit.
    pub(super) async fn write_segments(self: &Arc<Self>, due: Vec<(StretchKey, Held)>) {
        for (key, held) in due {
            self.enter().await;
            let engine = self.clone();
            tokio::spawn(async move {
                engine.write_segment(key, held).await;
                engine.leave();
            });
        }
    }

    async fn write_segment(&self, key: StretchKey, held: Held) {
        let id = segment_id(&key.device_id, key.start_ms);
        let mut read_first = false;
        loop {
            let attempt = if read_first {
                match self.read_segment(&key, &id).await {
                    Ok(()) => self.attempt(&key, &id, &held).await,
                    Err(attempt) => attempt,
                }
            } else {
                self.attempt(&key, &id, &held).await
            };
            read_first = matches!(attempt, Attempt::Read);
            if self.after(attempt, &key, &id, &held).await {
                return self.finish_segment(held);
            }
        }
    }

    /// Handles an attempt's end; `true` when the write is final.
    async fn after(&self, attempt: Attempt, key: &StretchKey, id: &str, held: &Held) -> bool {
        match attempt {
            Attempt::Done => true,
            Attempt::Read => false,
            Attempt::Again => {
                tokio::time::sleep(RETRY_PAUSE).await;
                false
            }
            Attempt::Refused(reason, detail) => {
                for _ in &held.points {
                    self.metrics.history_dropped(reason);
                }
                tracing::warn!(id, reason = reason.as_str(), %detail, "track segment not written");
                let body = self.segment_body(key, &held.points);
                self.rejects
                    .record_refused(&key.device_id, reason, detail, &body);
                true
            }
        }
    }

    fn segment_body(
        &self,
        key: &StretchKey,
        points: &[telemetry::document::SegmentPoint],
    ) -> Bytes {
        let stretch = self.segments().stretch(key);
        self.encoder.segment(&key.device_id, stretch, points)
    }

    /// One Create or Replace of the segment.
    async fn attempt(&self, key: &StretchKey, id: &str, held: &Held) -> Attempt {
        let pk = self.encoder.partition_key(&key.device_id);
        let stored = self.segments().stored(key);
        let (points, if_match) = match &stored {
            Some(stored) => {
                let (points, added) = merged(&stored.points, &held.points);
                if added == 0 {
                    return Attempt::Done;
                }
                (points, Some(stored.etag.as_str()))
            }
            None => (merged(&[], &held.points).0, None),
        };
        let added = points.len() - stored.as_ref().map_or(0, |s| s.points.len());
        let body = self.segment_body(key, &points);
        let result = match if_match {
            Some(etag) => self.container.replace(pk, id, &body, Some(etag)).await,
            None => self.container.create(pk, &body).await,
        };
        match result {
            Ok(written) => {
                self.metrics.history_written(added as u64);
                let stored = written.etag.map(|etag| (etag, points));
                self.segments().remember(key, stored);
                Attempt::Done
            }
            Err(CosmosError::Service(e)) if matches!(e.status, 404 | 409 | 412) => Attempt::Read,
            Err(err) => self.classify(&err, id),
        }
    }

    /// Point-reads the stored segment into what this writer knows.
    async fn read_segment(&self, key: &StretchKey, id: &str) -> Result<(), Attempt> {
        let pk = self.encoder.partition_key(&key.device_id);
        let read = match self.container.read(pk, id).await {
            Ok(read) => read,
            Err(err) => return Err(self.classify(&err, id)),
        };
        let known = match read {
            None => None,
            Some(read) => {
                let doc: serde_json::Value = serde_json::from_slice(&read.body).map_err(|e| {
                    Attempt::Refused(
                        DropReason::DocumentRefused,
                        format!("the stored segment {id} is not JSON: {e}"),
                    )
                })?;
                let points = stored_points(&doc).map_err(|e| {
                    Attempt::Refused(
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

    fn classify(&self, err: &CosmosError, id: &str) -> Attempt {
        match refusal::of_error(err) {
            Refusal::Document(reason) => Attempt::Refused(
                reason,
                format!("Cosmos DB refused the track segment {id}: {err}"),
            ),
            Refusal::Again | Refusal::None => Attempt::Again,
            Refusal::Hold(cause) => {
                tracing::warn!(id, cause = cause.as_str(), error = %err, "track segment write refused; trying again");
                Attempt::Again
            }
        }
    }

    fn finish_segment(&self, held: Held) {
        for ack in held.acks {
            ack.finish();
        }
    }
}

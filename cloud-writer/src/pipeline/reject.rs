//! What happens to a rejected message: counted by reason, logged with the device and a
//! short excerpt (rate-limited), and optionally appended to a dead-letter JSONL file.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;

use super::dead_letter::DeadLetterFile;
use super::validate::Rejection;
use crate::config::DeadLetterSettings;
use crate::metrics::{DropReason, Metrics};

/// Longest payload excerpt logged or dead-lettered, in bytes.
pub const EXCERPT_BYTES: usize = 160;
/// Most rejection log lines per [`LOG_WINDOW`]; the rest are summarised.
const LOG_BURST: u32 = 20;
const LOG_WINDOW: Duration = Duration::from_secs(10);

/// Records rejections.
#[derive(Debug, Clone)]
pub struct Rejects {
    metrics: Arc<Metrics>,
    dead_letter: Option<Arc<Mutex<DeadLetterFile>>>,
    limiter: Arc<Mutex<Limiter>>,
}

#[derive(Debug)]
struct Limiter {
    window_start: Instant,
    logged: u32,
    suppressed: u64,
}

/// One line of the dead-letter file.
#[derive(Serialize)]
struct DeadLetter<'a> {
    time: String,
    reason: DropReason,
    detail: String,
    identity: &'a str,
    /// The payload's first bytes, as lossy UTF-8.
    excerpt: String,
    size: usize,
}

/// The first [`EXCERPT_BYTES`] of a payload as lossy UTF-8.
pub fn excerpt(payload: &[u8]) -> String {
    String::from_utf8_lossy(&payload[..payload.len().min(EXCERPT_BYTES)]).into_owned()
}

impl Rejects {
    /// Counts into `metrics`; appends to the dead-letter file when given.
    pub fn new(
        metrics: Arc<Metrics>,
        dead_letter: Option<&DeadLetterSettings>,
    ) -> std::io::Result<Self> {
        let dead_letter = dead_letter
            .map(|settings| DeadLetterFile::open(settings).map(|f| Arc::new(Mutex::new(f))))
            .transpose()?;
        Ok(Rejects {
            metrics,
            dead_letter,
            limiter: Arc::new(Mutex::new(Limiter {
                window_start: Instant::now(),
                logged: 0,
                suppressed: 0,
            })),
        })
    }

    /// Records one rejected message.
    pub fn record(&self, identity: &str, payload: &[u8], rejection: &Rejection) {
        let reason = rejection.reason();
        self.metrics.dropped(reason);
        if let Rejection::Invalid(invalid) = rejection {
            self.metrics.invalid(invalid.reason());
        }
        if matches!(rejection, Rejection::Stale { .. }) {
            // Not bad input: counted, and visible in the lateness metrics.
            tracing::debug!(device = identity, detail = %rejection.detail(), "stale position dropped");
            return;
        }
        if self.may_log() {
            tracing::warn!(
                device = identity,
                reason = reason.as_str(),
                detail = %rejection.detail(),
                excerpt = %excerpt(payload),
                "message rejected"
            );
        }
        self.dead_letter(identity, reason, rejection.detail(), payload);
    }

    /// Records a message whose document Cosmos DB refused (`reason`, a drop reason):
    /// counted, logged (rate-limited) and dead-lettered.
    pub fn record_refused(
        &self,
        identity: &str,
        reason: DropReason,
        detail: String,
        payload: &[u8],
    ) {
        self.metrics.dropped(reason);
        if self.may_log() {
            tracing::warn!(device = identity, reason = reason.as_str(), %detail, "document refused by Cosmos DB; dead-lettered");
        }
        self.dead_letter(identity, reason, detail, payload);
        self.flush();
    }

    fn dead_letter(&self, identity: &str, reason: DropReason, detail: String, payload: &[u8]) {
        if let Some(file) = &self.dead_letter {
            let line = DeadLetter {
                time: Utc::now().to_rfc3339(),
                reason,
                detail,
                identity,
                excerpt: excerpt(payload),
                size: payload.len(),
            };
            let line = serde_json::to_vec(&line).expect("a dead letter serialises");
            let written = file.lock().unwrap_or_else(|e| e.into_inner()).append(&line);
            match written {
                Ok(0) => {}
                Ok(deleted) => self.metrics.dead_letters_rotated_away(deleted),
                Err(err) => tracing::error!(error = %err, "cannot write to the dead-letter file"),
            }
        }
    }

    /// Flushes the dead-letter file.
    pub fn flush(&self) {
        if let Some(file) = &self.dead_letter {
            if let Err(err) = file.lock().unwrap_or_else(|e| e.into_inner()).flush() {
                tracing::error!(error = %err, "cannot flush the dead-letter file");
            }
        }
    }

    fn may_log(&self) -> bool {
        let mut limiter = self.limiter.lock().unwrap_or_else(|e| e.into_inner());
        if limiter.window_start.elapsed() >= LOG_WINDOW {
            if limiter.suppressed > 0 {
                tracing::warn!(
                    suppressed = limiter.suppressed,
                    "more messages rejected (log lines suppressed)"
                );
            }
            *limiter = Limiter {
                window_start: Instant::now(),
                logged: 0,
                suppressed: 0,
            };
        }
        if limiter.logged < LOG_BURST {
            limiter.logged += 1;
            true
        } else {
            limiter.suppressed += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letters_are_jsonl_with_reason_and_excerpt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.jsonl");
        let metrics = Arc::new(Metrics::new());
        let settings = DeadLetterSettings {
            file: path.clone(),
            max_bytes: DeadLetterSettings::DEFAULT_MAX_BYTES,
        };
        let rejects = Rejects::new(metrics.clone(), Some(&settings)).unwrap();
        let long = vec![b'x'; 1000];
        rejects.record(
            "d1",
            &long,
            &Rejection::Invalid(telemetry::Invalid::TooLarge { size: 1000 }),
        );
        rejects.record(
            "d1",
            b"{}",
            &Rejection::Spoofed {
                claimed: "d2".into(),
            },
        );
        rejects.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["reason"], DropReason::Invalid.as_str());
        assert_eq!(lines[0]["excerpt"].as_str().unwrap().len(), EXCERPT_BYTES);
        assert_eq!(lines[1]["reason"], DropReason::Spoofed.as_str());
        assert_eq!(lines[1]["identity"], "d1");
        let counts = metrics.counts();
        assert_eq!(counts.dropped(DropReason::Invalid), 1);
        assert_eq!(counts.dropped(DropReason::Spoofed), 1);
        let invalid = [(telemetry::wire::InvalidReason::TooLarge, 1)];
        assert_eq!(counts.invalid, invalid.into());
    }

    #[test]
    fn lines_deleted_by_a_rotation_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(Metrics::new());
        let settings = DeadLetterSettings {
            file: dir.path().join("dead.jsonl"),
            max_bytes: 1,
        };
        let rejects = Rejects::new(metrics.clone(), Some(&settings)).unwrap();
        let spoofed = Rejection::Spoofed {
            claimed: "d2".into(),
        };
        // One line a file: the third line's rotation deletes the first.
        for _ in 0..3 {
            rejects.record("d1", b"{}", &spoofed);
        }
        let text = metrics.render();
        assert!(
            text.contains("\ncloud_writer_dead_letters_rotated_away_total 1\n"),
            "{text}"
        );
    }
}

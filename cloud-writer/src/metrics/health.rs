//! The readiness and liveness rule behind `/readyz` and `/healthz`, and their gauges.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Metrics;

impl Metrics {
    /// Sets the `ready` and `live` gauges to what `/readyz` and `/healthz` answer now
    /// (liveness under `stall_after`); the metrics server calls it before rendering.
    pub fn update_health(&self, stall_after: Duration) {
        self.ready_gauge.set(i64::from(self.is_ready()));
        self.live_gauge.set(i64::from(self.is_live(stall_after)));
    }

    /// Whether the writer is making progress: true unless work is pending (positions
    /// in flight, or messages queued) and no message reached its outcome for
    /// `stall_after`. Progress is noticed when this is called, so the stall is measured
    /// from the first call that saw the last change.
    pub fn is_live(&self, stall_after: Duration) -> bool {
        self.is_live_at(stall_after, Instant::now())
    }

    pub(super) fn is_live_at(&self, stall_after: Duration, now: Instant) -> bool {
        let finished = self.counts().finished();
        let mut progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        if progress.0 != finished {
            *progress = (finished, now);
            return true;
        }
        let pending = self.in_flight.get() > 0 || self.queue_bytes.get() > 0;
        !pending || now.saturating_duration_since(progress.1) < stall_after
    }

    /// Marks the writer ready (`/readyz` answers 200).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether the writer is ready: started, its source connected and with its share of the
    /// work (an Event Hubs replica owns a partition, or there is none left to own), and not
    /// holding the stream.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
            && self.source_connected.get() == 1
            && self.source_assigned.get() == 1
            && self.blocked().is_none()
    }
}

//! The summary of the counts the writer logs on an interval while it runs, and once when
//! it stops.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::metrics::{Counts, DropReason, HoldReason, Metrics};

/// Logs a summary every `interval` until `stop`.
pub(super) async fn summarise(metrics: Arc<Metrics>, interval: Duration, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut last = metrics.counts();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => return,
        }
        let now = metrics.counts();
        log_summary(&metrics, Some((&last, interval)));
        last = now;
    }
}

/// Logs the counts, with the rate received since the last summary (`since`: its counts
/// and the interval) when given.
pub(super) fn log_summary(metrics: &Metrics, since: Option<(&Counts, Duration)>) {
    let c = metrics.counts();
    let rate = since.map_or(0.0, |(last, interval)| {
        (c.received - last.received) as f64 / interval.as_secs_f64()
    });
    tracing::info!(
        received = c.received,
        written = c.written,
        history_written = c.history_written,
        superseded = c.dropped(DropReason::Superseded),
        stale = c.dropped(DropReason::Stale),
        invalid = c.dropped(DropReason::Invalid),
        spoofed = c.dropped(DropReason::Spoofed),
        from_future = c.dropped(DropReason::FromFuture),
        write_failed = c.dropped(DropReason::WriteFailed),
        stale_in_retry = c.dropped(DropReason::StaleInRetry),
        refused = c.dropped(DropReason::DocumentTooLarge)
            + c.dropped(DropReason::DocumentMalformed)
            + c.dropped(DropReason::DocumentRefused),
        history_dropped = c.history_dropped,
        held = metrics.blocked().map_or("no", HoldReason::as_str),
        in_flight = c.in_flight,
        throttled = metrics.throttled_total(),
        received_per_s = rate,
        "summary"
    );
}

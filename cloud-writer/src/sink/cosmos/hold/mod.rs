//! Holding the stream while Cosmos DB refuses every write: the gate new writes wait at,
//! the writes parked meanwhile, and the supervisor that probes on its own schedule until a
//! probe proves the cause gone, then opens the gate and sends the parked writes again.
//!
//! While held nothing new is taken (the sink's `write` waits at the gate, so the pipeline
//! and then the source stop), nothing parked is acknowledged, `/readyz` answers 503, the
//! metric `writer_blocked{reason}` names the cause, `writer_holds_total{reason}` counts
//! the hold once, and one log line per [`LOG_INTERVAL`] says what fixes it.
//!
//! # Probes
//! The supervisor probes with backoff ([`PROBE_BACKOFF`]), whatever the writes in flight
//! are doing: a probe does not queue behind them in the bulk writer (behind tens of
//! thousands of parked writes it would not be answered for minutes), and the log line is
//! written on its own interval, not on a probe's answer. What proves the cause gone ([`Proof`]): for a refused key, a missing
//! container or an outage, a request of the container answered (authorized, the
//! container there, the service answering), made by [`Resubmit::probe`] within
//! [`PROBE_TIMEOUT`]; for a refusal of the batch requests themselves (Patch unsupported, a
//! request refused), only a write proves it, so a parked write is sent as the probe, and
//! with none parked the stream stays held.
//!
//! # Staleness while held
//! Parked positions that turn older than `STALE_AFTER` are dropped and acknowledged
//! (`stale_in_retry`) while held, at every probe ([`Resubmit::keep_if_fresh`]; the sink
//! keeps its track segments, which do not turn stale); the gate
//! stays shut until a probe passes, however few are left: opening it for lack of anything
//! to probe with would let the next writes be refused again, and one outage would become
//! hundreds of holds. What the writes are and how they are sent again is the sink's
//! business ([`Resubmit`]).
//!
//! `tests` runs the hold on tokio's paused time.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use retry_backoff::{Backoff, BackoffConfig};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::metrics::HoldReason;
use crate::metrics::Metrics;

/// The probes' schedule: the first within 250 ms of the hold, the window doubling up to
/// 5 s (full jitter).
pub const PROBE_BACKOFF: BackoffConfig = BackoffConfig {
    base: Duration::from_millis(250),
    cap: Duration::from_secs(5),
};
/// A probe request not answered by then counts as refused (`unavailable`).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// At most one log line per interval while held.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What proves that writes would be accepted again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// A request of the container answered ([`Resubmit::probe`]).
    Request,
    /// A write accepted: one parked write is sent as the probe.
    Write,
}

impl Proof {
    /// The proof `cause` needs.
    pub fn of(cause: HoldReason) -> Proof {
        match cause {
            HoldReason::Unauthorized | HoldReason::ContainerMissing | HoldReason::Unavailable => {
                Proof::Request
            }
            HoldReason::PatchUnsupported | HoldReason::RequestRefused => Proof::Write,
        }
    }
}

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    /// Writes would be accepted.
    Passed,
    /// Refused again, for this cause.
    Refused(HoldReason),
    /// The probe write ended without telling (it turned stale while sent).
    Inconclusive,
}

/// How the sink sends parked writes again and probes.
pub trait Resubmit<T>: Send + Sync + 'static {
    /// Sends `item` again (as the probe when `probe`); `false` when it was finished without
    /// being sent (it turned stale meanwhile).
    fn resubmit(self: Arc<Self>, item: T, probe: bool) -> BoxFuture<'static, bool>;

    /// Called before each probe: e.g. reads the key file again after a 401.
    fn before_probe(&self, cause: HoldReason);

    /// A request that proves writes would be accepted for a [`Proof::Request`] cause: `Ok`
    /// when answered, else the cause it was refused for.
    fn probe(self: Arc<Self>) -> BoxFuture<'static, Result<(), HoldReason>>;

    /// Gives `item` back while it is fresh; finishes it (dropped as stale, acknowledged,
    /// counted) when it turned stale.
    fn keep_if_fresh(&self, item: T) -> Option<T>;
}

/// The hold: the gate, the parked writes and the probe results.
pub struct Hold<T> {
    cause: watch::Sender<Option<HoldReason>>,
    parked: Mutex<VecDeque<T>>,
    probe_results: mpsc::UnboundedSender<ProbeResult>,
    probe_rx: Mutex<Option<mpsc::UnboundedReceiver<ProbeResult>>>,
    metrics: Arc<Metrics>,
}

impl<T: Send + 'static> Hold<T> {
    /// An open gate.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        let (probe_results, probe_rx) = mpsc::unbounded_channel();
        Hold {
            cause: watch::Sender::new(None),
            parked: Mutex::new(VecDeque::new()),
            probe_results,
            probe_rx: Mutex::new(Some(probe_rx)),
            metrics,
        }
    }

    /// Waits while the stream is held.
    pub async fn wait_open(&self) {
        if self.cause.borrow().is_none() {
            return;
        }
        let mut rx = self.cause.subscribe();
        let _ = rx.wait_for(Option::is_none).await;
    }

    /// Why the stream is held, if it is.
    pub fn cause(&self) -> Option<HoldReason> {
        *self.cause.borrow()
    }

    /// Parks a write refused for `cause`; holds the stream if it is not held yet. A probe's
    /// refusal is its result: the supervisor backs off and probes again.
    pub fn park(&self, item: T, cause: HoldReason, probe: bool) {
        self.lock().push_back(item);
        let started = self.cause.send_if_modified(|held| {
            let start = held.is_none();
            if start {
                *held = Some(cause);
            }
            start
        });
        if started {
            self.metrics.hold_started(cause);
            self.metrics.set_blocked(Some(cause));
            tracing::error!(
                reason = cause.as_str(),
                "holding the stream: nothing more is taken or acknowledged until Cosmos DB accepts writes again; {}",
                cause.remedy()
            );
        }
        if probe {
            let _ = self.probe_results.send(ProbeResult::Refused(cause));
        }
    }

    /// The probe write's result (its answer was not a refusal of every write: passed).
    pub fn probe_result(&self, result: ProbeResult) {
        let _ = self.probe_results.send(result);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<T>> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs the supervisor: for each hold, probes until one proves the cause gone, then
    /// opens the gate and sends every parked write again. Ends when the gate's last
    /// subscriber is gone (never, in practice: it is aborted with the sink).
    pub async fn supervise<R: Resubmit<T>>(self: Arc<Self>, target: Arc<R>) {
        let Some(mut results) = self
            .probe_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let mut changes = self.cause.subscribe();
        let mut backoff = Backoff::new(PROBE_BACKOFF);
        loop {
            if changes.wait_for(Option::is_some).await.is_err() {
                return;
            }
            let mut ticks = Ticks::new();
            backoff.reset();
            while let Some(cause) = self.cause() {
                tokio::time::sleep(backoff.next_delay()).await;
                self.tick(&*target, &mut ticks, cause);
                target.before_probe(cause);
                let result = match Proof::of(cause) {
                    Proof::Request => {
                        match tokio::time::timeout(PROBE_TIMEOUT, target.clone().probe()).await {
                            Ok(Ok(())) => ProbeResult::Passed,
                            Ok(Err(cause)) => ProbeResult::Refused(cause),
                            Err(_) => ProbeResult::Refused(HoldReason::Unavailable),
                        }
                    }
                    Proof::Write => self.probe_write(&target, &mut results, &mut ticks).await,
                };
                tracing::debug!(
                    ?result,
                    held_for_ms = ticks.started.elapsed().as_millis() as u64,
                    "probe answered"
                );
                match result {
                    ProbeResult::Passed => break,
                    ProbeResult::Inconclusive => {}
                    ProbeResult::Refused(cause) => {
                        self.cause.send_replace(Some(cause));
                        self.metrics.set_blocked(Some(cause));
                    }
                }
            }
            self.cause.send_replace(None);
            self.metrics.set_blocked(None);
            let parked: Vec<T> = self.lock().drain(..).collect();
            tracing::warn!(
                held_for_ms = ticks.started.elapsed().as_millis() as u64,
                parked = parked.len(),
                "Cosmos DB accepts writes again: resuming"
            );
            for item in parked {
                target.clone().resubmit(item, false).await;
            }
        }
    }

    /// Sends one parked write as the probe and waits for its result, dropping stale parked
    /// writes and logging meanwhile; refused again when nothing fresh is parked.
    async fn probe_write<R: Resubmit<T>>(
        &self,
        target: &Arc<R>,
        results: &mut mpsc::UnboundedReceiver<ProbeResult>,
        ticks: &mut Ticks,
    ) -> ProbeResult {
        let cause = self.cause().unwrap_or(HoldReason::Unavailable);
        loop {
            let next = self.lock().pop_front();
            let Some(item) = next else {
                return ProbeResult::Refused(cause);
            };
            if target.clone().resubmit(item, true).await {
                break;
            }
        }
        loop {
            match tokio::time::timeout(LOG_INTERVAL, results.recv()).await {
                Ok(Some(result)) => return result,
                Ok(None) => return ProbeResult::Inconclusive,
                Err(_) => self.tick(&**target, ticks, cause),
            }
        }
    }

    /// While held: drops the parked writes that turned stale, and logs once per
    /// [`LOG_INTERVAL`].
    fn tick<R: Resubmit<T>>(&self, target: &R, ticks: &mut Ticks, cause: HoldReason) {
        let parked = {
            let mut parked = self.lock();
            let items = std::mem::take(&mut *parked);
            parked.extend(items.into_iter().filter_map(|i| target.keep_if_fresh(i)));
            parked.len()
        };
        if ticks.last_log.elapsed() >= LOG_INTERVAL {
            ticks.last_log = Instant::now();
            tracing::error!(
                reason = cause.as_str(),
                held_for_s = ticks.started.elapsed().as_secs(),
                parked,
                "still holding the stream; {}",
                cause.remedy()
            );
        }
    }
}

/// When a hold started and last logged.
struct Ticks {
    started: Instant,
    last_log: Instant,
}

impl Ticks {
    fn new() -> Ticks {
        let now = Instant::now();
        Ticks {
            started: now,
            last_log: now,
        }
    }
}

#[cfg(test)]
mod tests;

//! Holding the stream while Cosmos DB refuses every write: the gate new writes wait at,
//! the writes parked meanwhile, and the supervisor that probes with one parked write at a
//! time, backing off, until one gets an answer other than the refusal, then opens the gate
//! and sends the parked writes again.
//!
//! While held nothing new is taken (the sink's `write` waits at the gate, so the pipeline
//! and then the source stop), nothing parked is acknowledged, `/readyz` answers 503, the
//! metric `writer_blocked{reason}` names the cause, and one log line per
//! [`LOG_INTERVAL`] says what fixes it. What the writes are and how they are sent again is
//! the sink's business ([`Resubmit`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use super::refusal::Cause;
use crate::metrics::Metrics;

/// Wait before the first probe.
const FIRST_PROBE: Duration = Duration::from_millis(250);
/// Longest wait between probes.
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// At most one log line per interval while held.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// How the sink sends parked writes again.
pub trait Resubmit<T>: Send + Sync + 'static {
    /// Sends `item` again (as the probe when `probe`); `false` when it was finished without
    /// being sent (it turned stale meanwhile).
    fn resubmit(self: Arc<Self>, item: T, probe: bool) -> BoxFuture<'static, bool>;

    /// Called before each probe: e.g. reads the key file again after a 401.
    fn before_probe(&self, cause: Cause);
}

/// The hold: the gate, the parked writes and the probe results.
pub struct Hold<T> {
    cause: watch::Sender<Option<Cause>>,
    parked: Mutex<VecDeque<T>>,
    probe_results: mpsc::UnboundedSender<Option<Cause>>,
    probe_rx: Mutex<Option<mpsc::UnboundedReceiver<Option<Cause>>>>,
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
    pub fn cause(&self) -> Option<Cause> {
        *self.cause.borrow()
    }

    /// Parks a write refused for `cause`; holds the stream if it is not held yet. A probe's
    /// refusal is its result: the supervisor backs off and probes again.
    pub fn park(&self, item: T, cause: Cause, probe: bool) {
        self.lock().push_back(item);
        let started = self.cause.send_if_modified(|held| {
            let start = held.is_none();
            if start {
                *held = Some(cause);
            }
            start
        });
        if started {
            self.metrics.set_blocked(Some(cause.label()));
            tracing::error!(
                reason = cause.label(),
                "holding the stream: nothing more is taken or acknowledged until Cosmos DB accepts writes again; {}",
                cause.remedy()
            );
        }
        if probe {
            let _ = self.probe_results.send(Some(cause));
        }
    }

    /// The probe got an answer other than a refusal of every write.
    pub fn probe_passed(&self) {
        let _ = self.probe_results.send(None);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<T>> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs the supervisor: for each hold, probes until the cause is gone, then opens the
    /// gate and sends every parked write again. Ends when `target` is dropped elsewhere and
    /// the gate's last subscriber is gone (never, in practice: it is aborted with the sink).
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
        loop {
            if changes.wait_for(Option::is_some).await.is_err() {
                return;
            }
            let started = Instant::now();
            let mut last_log = started;
            let mut wait = FIRST_PROBE;
            while let Some(cause) = self.cause() {
                tokio::time::sleep(wait).await;
                target.before_probe(cause);
                let mut sent = false;
                loop {
                    let next = self.lock().pop_front();
                    let Some(item) = next else { break };
                    if target.clone().resubmit(item, true).await {
                        sent = true;
                        break;
                    }
                }
                // Nothing left to probe with: open, and let the next write find out.
                if !sent {
                    break;
                }
                match results.recv().await {
                    Some(None) | None => break,
                    Some(Some(cause)) => {
                        self.cause.send_replace(Some(cause));
                        self.metrics.set_blocked(Some(cause.label()));
                        wait = (wait * 2).min(MAX_PROBE_INTERVAL);
                        if last_log.elapsed() >= LOG_INTERVAL {
                            last_log = Instant::now();
                            let parked = self.lock().len();
                            tracing::error!(
                                reason = cause.label(),
                                held_for_s = started.elapsed().as_secs(),
                                parked,
                                "still holding the stream; {}",
                                cause.remedy()
                            );
                        }
                    }
                }
            }
            self.cause.send_replace(None);
            self.metrics.set_blocked(None);
            let parked: Vec<T> = self.lock().drain(..).collect();
            tracing::warn!(
                held_for_ms = started.elapsed().as_millis() as u64,
                parked = parked.len(),
                "Cosmos DB accepts writes again: resuming"
            );
            for item in parked {
                target.clone().resubmit(item, false).await;
            }
        }
    }
}

//! The dispatcher task of a bulk writer: routes operations to their ranges, cuts batches,
//! keeps each range within its AIMD concurrency limit and its retry-after pause, puts retried
//! operations back at the front of their range, and re-routes moved operations after a
//! range map refresh.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Semaphore, mpsc, watch};

use super::aimd::Aimd;
use super::batch::{BatchDone, WriterContext};
use super::{BulkConfig, FinalError, Msg, Outcome, PendingOp, StatsCell};
use crate::ranges::RangeMap;
use crate::{ContainerClient, CosmosError};

/// What [`spawn`] needs.
pub(super) struct Parts<T> {
    pub container: ContainerClient,
    pub config: BulkConfig,
    pub ops: mpsc::UnboundedReceiver<Msg<T>>,
    pub outcomes: mpsc::UnboundedSender<Outcome<T>>,
    pub stats: Arc<StatsCell>,
    pub permits: Arc<Semaphore>,
    pub done: watch::Sender<bool>,
}

/// Starts the dispatcher on the current runtime.
pub(super) fn spawn<T: Send + 'static>(parts: Parts<T>) {
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let docs_path = parts.container.docs_path();
    let dispatcher = Dispatcher {
        writer: Arc::new(WriterContext {
            container: parts.container,
            docs_path,
            config: parts.config,
            outcomes: parts.outcomes,
            stats: parts.stats,
        }),
        ops: parts.ops,
        permits: parts.permits,
        done: parts.done,
        events_tx,
        events_rx,
        map: None,
        ranges: Vec::new(),
        parked: Vec::new(),
        refreshing: false,
        refresh_failures: 0,
        in_flight: 0,
        inputs_closed: false,
    };
    tokio::spawn(dispatcher.run());
}

enum Event<T> {
    Batch(BatchDone<T>),
    Ranges(Result<Arc<RangeMap>, CosmosError>),
}

/// The queue and controls of one partition key range.
struct RangeState<T> {
    id: Arc<str>,
    queue: VecDeque<PendingOp<T>>,
    queued_bytes: usize,
    in_flight: usize,
    aimd: Aimd,
    paused_until: Option<Instant>,
    /// Consecutive transiently failed batches, for the backoff.
    transient_failures: u32,
    /// Most operations of the next batch: shrinks to about what the range admits per round
    /// trip while it throttles, grows back while it does not.
    batch_cap: usize,
}

impl<T> RangeState<T> {
    fn new(id: &str, config: &BulkConfig) -> Self {
        Self {
            id: id.into(),
            queue: VecDeque::new(),
            queued_bytes: 0,
            in_flight: 0,
            aimd: Aimd::new(config.initial_concurrency, config.max_concurrency_per_range),
            paused_until: None,
            transient_failures: 0,
            batch_cap: config.max_operations,
        }
    }

    /// Adapts the batch size: after a throttled batch, twice what the range admitted (so
    /// that about half of the next batch gets through); after a clean one, double.
    fn adapt_batch_cap(&mut self, done: &BatchDone<T>, max: usize) {
        self.batch_cap = if done.throttled_ops > 0 {
            (2 * (done.sent_ops - done.throttled_ops)).clamp(1, max)
        } else if !done.transient && done.moved.is_empty() {
            (2 * self.batch_cap).min(max)
        } else {
            self.batch_cap
        };
    }

    fn push_back(&mut self, op: PendingOp<T>) {
        self.queued_bytes += op.size;
        self.queue.push_back(op);
    }

    fn push_front(&mut self, op: PendingOp<T>) {
        self.queued_bytes += op.size;
        self.queue.push_front(op);
    }

    fn pause(&mut self, until: Instant) {
        self.paused_until = Some(self.paused_until.map_or(until, |t| t.max(until)));
    }

    /// Whether a batch should leave now (concurrency permitting).
    fn ready(&self, now: Instant, closing: bool, config: &BulkConfig) -> bool {
        match self.queue.front() {
            None => false,
            Some(front) => {
                closing
                    || self.queue.len() >= self.batch_cap
                    || self.queued_bytes >= config.target_bytes
                    || now >= front.queued_at + config.flush_interval
            }
        }
    }

    /// Takes the next batch off the front of the queue (at least one operation).
    fn cut(&mut self, config: &BulkConfig) -> Vec<PendingOp<T>> {
        let mut batch = Vec::with_capacity(config.max_operations.min(self.queue.len()));
        let mut bytes = 0;
        while let Some(op) = self.queue.front() {
            if batch.len() == self.batch_cap
                || (!batch.is_empty() && bytes + op.size > config.target_bytes)
            {
                break;
            }
            bytes += op.size;
            self.queued_bytes -= op.size;
            batch.push(self.queue.pop_front().expect("front exists"));
        }
        batch
    }
}

struct Dispatcher<T> {
    writer: Arc<WriterContext<T>>,
    ops: mpsc::UnboundedReceiver<Msg<T>>,
    permits: Arc<Semaphore>,
    done: watch::Sender<bool>,
    events_tx: mpsc::UnboundedSender<Event<T>>,
    events_rx: mpsc::UnboundedReceiver<Event<T>>,
    map: Option<Arc<RangeMap>>,
    /// One state per range of `map`, in the same order.
    ranges: Vec<RangeState<T>>,
    /// Operations waiting for a range map (at the start, or after their range moved).
    parked: Vec<PendingOp<T>>,
    refreshing: bool,
    refresh_failures: u32,
    /// Batches in flight over all ranges, including ranges that left the map.
    in_flight: usize,
    inputs_closed: bool,
}

/// Messages taken from a channel in one go before batches are cut.
const DRAIN: usize = 4096;

impl<T: Send + 'static> Dispatcher<T> {
    async fn run(mut self) {
        self.start_refresh();
        loop {
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                Some(event) = self.events_rx.recv() => self.on_event(event),
                msg = self.ops.recv(), if !self.inputs_closed => self.on_msg(msg),
                _ = sleep_until(deadline), if deadline.is_some() => {}
            }
            for _ in 0..DRAIN {
                match self.events_rx.try_recv() {
                    Ok(event) => self.on_event(event),
                    Err(_) => break,
                }
            }
            if !self.inputs_closed {
                for _ in 0..DRAIN {
                    match self.ops.try_recv() {
                        Ok(msg) => self.on_msg(Some(msg)),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => {
                            self.on_msg(None);
                            break;
                        }
                    }
                }
            }
            self.dispatch_ready(Instant::now());
            if self.finished() {
                break;
            }
        }
        let _ = self.done.send(true);
    }

    fn finished(&self) -> bool {
        self.inputs_closed
            && self.in_flight == 0
            && self.parked.is_empty()
            && self.ranges.iter().all(|r| r.queue.is_empty())
    }

    fn on_msg(&mut self, msg: Option<Msg<T>>) {
        match msg {
            Some(Msg::Op(op)) => self.route(op),
            Some(Msg::Invalid(outcome)) => self.writer.emit(outcome),
            Some(Msg::Close) => {
                // Refuse new operations; those already sent are still received.
                self.ops.close();
                self.permits.close();
            }
            None => self.inputs_closed = true,
        }
    }

    fn on_event(&mut self, event: Event<T>) {
        match event {
            Event::Batch(done) => self.on_batch(done),
            Event::Ranges(Ok(map)) => self.on_ranges(map),
            Event::Ranges(Err(error)) => {
                self.refreshing = false;
                self.refresh_failures += 1;
                tracing::warn!(%error, failures = self.refresh_failures, "reading partition key ranges failed");
                if self.refresh_failures >= self.writer.config.retry.max_attempts {
                    self.refresh_failures = 0;
                    let reason = error.to_string();
                    let (status, substatus) = (error.status().unwrap_or(0), error.substatus());
                    for op in std::mem::take(&mut self.parked) {
                        let error = Some(FinalError::Ranges(reason.clone()));
                        self.writer.stats.update(|s| s.failed += 1);
                        self.writer
                            .emit(op.into_outcome(status, substatus, None, "", error, true));
                    }
                } else if !self.parked.is_empty() {
                    self.start_refresh();
                }
            }
        }
    }

    fn route(&mut self, op: PendingOp<T>) {
        match &self.map {
            Some(map) => {
                let index = map.index_of_epk(op.epk);
                self.ranges[index].push_back(op);
            }
            None => {
                self.parked.push(op);
                self.start_refresh();
            }
        }
    }

    fn start_refresh(&mut self) {
        if self.refreshing {
            return;
        }
        self.refreshing = true;
        let container = self.writer.container.clone();
        let stale = self.map.clone();
        let events = self.events_tx.clone();
        let delay = match self.refresh_failures {
            0 => std::time::Duration::ZERO,
            n => self.writer.config.retry.delay(n, None),
        };
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let result = match &stale {
                None => container.range_map().await,
                Some(map) => container.refresh_range_map(Some(map)).await,
            };
            let _ = events.send(Event::Ranges(result));
        });
    }

    fn on_ranges(&mut self, map: Arc<RangeMap>) {
        self.refreshing = false;
        // A map that did not change (the service still lists a range it answers 410 for)
        // counts like a failed refresh, so the next one backs off.
        let unchanged = self.map.as_deref() == Some(&*map);
        self.refresh_failures = if unchanged {
            self.refresh_failures + 1
        } else {
            0
        };
        if self.map.is_some() {
            self.writer.stats.update(|s| s.range_refreshes += 1);
        }
        let mut old = std::mem::take(&mut self.ranges);
        for range in map.ranges() {
            let state = match old.iter().position(|s| *s.id == *range.id) {
                Some(pos) => old.swap_remove(pos),
                None => RangeState::new(&range.id, &self.writer.config),
            };
            self.ranges.push(state);
        }
        self.map = Some(map);
        self.record_concurrency();
        // Ranges that left the map hand their queues over; their batches in flight come back
        // through `on_batch` and are re-routed there.
        let mut homeless: Vec<PendingOp<T>> = std::mem::take(&mut self.parked);
        for state in old {
            homeless.extend(state.queue);
        }
        for op in homeless {
            self.route(op);
        }
    }

    fn on_batch(&mut self, done: BatchDone<T>) {
        self.in_flight -= 1;
        let now = Instant::now();
        let policy = &self.writer.config.retry;
        match self.ranges.iter_mut().find(|s| s.id == done.range_id) {
            Some(state) => {
                state.in_flight -= 1;
                state.adapt_batch_cap(&done, self.writer.config.max_operations);
                if done.throttled {
                    if state.aimd.on_throttle(done.generation) {
                        tracing::debug!(range = %state.id, limit = state.aimd.limit(), "range throttled");
                    }
                    state.pause(now + policy.delay(1, done.retry_after));
                } else if done.transient {
                    // Timeouts, 503s and 449s mean an overloaded server too: back off the same way.
                    state.aimd.on_throttle(done.generation);
                    state.transient_failures += 1;
                    state.pause(now + policy.delay(state.transient_failures, None));
                } else if done.moved.is_empty() {
                    state.transient_failures = 0;
                    state.aimd.on_success(done.generation);
                }
                for op in done.retry.into_iter().rev() {
                    state.push_front(op);
                }
                let (id, limit) = (state.id.clone(), state.aimd.limit());
                self.writer.stats.update(|s| {
                    s.ranges.entry(id.to_string()).or_default().concurrency = limit;
                });
            }
            None => {
                for op in done.retry {
                    self.route(op);
                }
            }
        }
        if !done.moved.is_empty() {
            self.parked.extend(done.moved);
            self.start_refresh();
        }
    }

    fn record_concurrency(&self) {
        let limits: Vec<(String, usize)> = self
            .ranges
            .iter()
            .map(|r| (r.id.to_string(), r.aimd.limit()))
            .collect();
        self.writer.stats.update(|s| {
            for range in s.ranges.values_mut() {
                range.concurrency = 0;
            }
            for (id, limit) in limits {
                s.ranges.entry(id).or_default().concurrency = limit;
            }
        });
    }

    fn dispatch_ready(&mut self, now: Instant) {
        let closing = self.inputs_closed;
        let config = &self.writer.config;
        for state in &mut self.ranges {
            match state.paused_until {
                Some(until) if until > now => continue,
                Some(_) => state.paused_until = None,
                None => {}
            }
            while state.in_flight < state.aimd.limit() && state.ready(now, closing, config) {
                let batch = state.cut(config);
                state.in_flight += 1;
                self.in_flight += 1;
                let writer = self.writer.clone();
                let events = self.events_tx.clone();
                let (id, generation) = (state.id.clone(), state.aimd.generation());
                tokio::spawn(async move {
                    let done = writer.send_batch(id, generation, batch).await;
                    let _ = events.send(Event::Batch(done));
                });
            }
        }
    }

    /// When the dispatcher must look again without a message: the end of a range's pause,
    /// or the flush time of a range's oldest operation.
    fn next_deadline(&self) -> Option<Instant> {
        let flush = self.writer.config.flush_interval;
        self.ranges
            .iter()
            .filter_map(|state| {
                let front = state.queue.front()?;
                match state.paused_until {
                    Some(until) => Some(until),
                    None if state.in_flight < state.aimd.limit() => Some(front.queued_at + flush),
                    None => None,
                }
            })
            .min()
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(deadline.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosmos_wire::batch::OperationType;
    use std::time::Duration;

    fn op(size: usize, queued_at: Instant) -> PendingOp<()> {
        PendingOp {
            kind: OperationType::Upsert,
            partition_key: "p".into(),
            pk_json: "[\"p\"]".into(),
            id: None,
            body: None,
            if_match: None,
            epk: 0,
            size,
            context: (),
            attempts: 0,
            failures: 0,
            request_charge: 0.0,
            first_sent: None,
            queued_at,
            _permit: Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap(),
        }
    }

    fn done(sent_ops: usize, throttled_ops: usize) -> BatchDone<()> {
        BatchDone {
            range_id: "0".into(),
            generation: 0,
            retry: Vec::new(),
            moved: Vec::new(),
            throttled: throttled_ops > 0,
            retry_after: None,
            transient: false,
            sent_ops,
            throttled_ops,
        }
    }

    #[test]
    fn batches_are_cut_by_count_and_bytes() {
        let config = BulkConfig {
            max_operations: 3,
            target_bytes: 1_000,
            ..BulkConfig::default()
        };
        let now = Instant::now();
        let mut range = RangeState::new("0", &config);
        for _ in 0..7 {
            range.push_back(op(100, now));
        }
        assert_eq!(range.cut(&config).len(), 3);
        assert_eq!(range.queued_bytes, 400);
        // Bytes: 400 + 700 would pass the target, so the big one waits for the next batch.
        range.push_back(op(700, now));
        assert_eq!(range.cut(&config).len(), 3);
        assert_eq!(range.cut(&config).len(), 2);
        // An operation above the target still leaves, alone.
        range.push_back(op(5_000, now));
        range.push_back(op(100, now));
        assert_eq!(range.cut(&config).len(), 1);
        assert_eq!(range.cut(&config).len(), 1);
        assert!(range.queue.is_empty());
        assert_eq!(range.queued_bytes, 0);
    }

    #[test]
    fn a_batch_leaves_when_full_old_or_closing() {
        let config = BulkConfig {
            max_operations: 2,
            target_bytes: 1_000,
            flush_interval: Duration::from_millis(10),
            ..BulkConfig::default()
        };
        let now = Instant::now();
        let mut range = RangeState::new("0", &config);
        assert!(!range.ready(now, true, &config), "nothing to send");
        range.push_back(op(10, now));
        assert!(!range.ready(now, false, &config));
        assert!(range.ready(now, true, &config), "closing flushes");
        assert!(
            range.ready(now + Duration::from_millis(10), false, &config),
            "flush timer"
        );
        range.push_back(op(10, now));
        assert!(range.ready(now, false, &config), "full by count");
        let mut big = RangeState::new("1", &config);
        big.push_back(op(1_000, now));
        assert!(big.ready(now, false, &config), "full by bytes");
    }

    #[test]
    fn batch_size_follows_what_a_throttled_range_admits() {
        let config = BulkConfig::default();
        let now = Instant::now();
        let mut range = RangeState::<()>::new("0", &config);
        assert_eq!(range.batch_cap, 100);
        range.adapt_batch_cap(&done(100, 97), 100);
        assert_eq!(range.batch_cap, 6);
        range.adapt_batch_cap(&done(6, 6), 100);
        assert_eq!(range.batch_cap, 1, "never below one");
        range.adapt_batch_cap(&done(1, 0), 100);
        assert_eq!(range.batch_cap, 2);
        for _ in 0..10 {
            range.adapt_batch_cap(&done(2, 0), 100);
        }
        assert_eq!(range.batch_cap, 100, "grows back to the limit");
        // The cap decides when a batch is full.
        range.adapt_batch_cap(&done(100, 99), 100);
        range.push_back(op(10, now));
        range.push_back(op(10, now));
        assert!(range.ready(now, false, &config));
        assert_eq!(range.cut(&config).len(), 2);
    }
}

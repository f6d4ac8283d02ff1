//! The agent: every interval the latest fix becomes a message with the next `seq`, is
//! written to the disk buffer, and is published, alone or, with `PUBLISH_EVERY`, in a
//! batch with the samples since the last publish ([`crate::batch`]); the transport
//! reports which publish the broker acknowledged (it keeps the packet ids, which hold even
//! when the broker acknowledges out of order and reuses them), and its records leave the
//! buffer.
//!
//! # Delivery order
//! - While connected, a new message is published at once (it has priority); with
//!   batching, a batch as soon as it is due.
//! - After a (re)connect, the newest buffered position goes first (with batching, in the
//!   batch being gathered), so the fleet map is current at once; then the backlog drains
//!   oldest first, at most [`AgentConfig::backlog_rate`] messages per second (with
//!   batching, each a batch of up to 4 KB) and never filling the last in-flight slot, so
//!   live positions are never held up behind the backlog.
//! - At most [`crate::transport::TransportConfig::max_inflight`] publishes await PUBACK.
//!   Whatever a link did not acknowledge is sent again from the buffer on the next link
//!   (at-least-once; the cloud keeps the newest position of each drone).
//!
//! # Control plane (IoT Hub only)
//! The device twin's desired `reportInterval` and `publishEvery` override the local
//! settings (unless `REMOTE_CONFIG=off`) and take effect at once: the batch being gathered
//! goes, and the next sample is one new interval away. The direct method `reportNow` makes
//! a message of the latest fix at once, through the buffer like every other. See
//! [`crate::twin`].
//!
//! One agent is three tasks at most (this loop, the connection, and a MAVLink or gpsd
//! reader), so a process can run a fleet of them.

mod link;
mod remote;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::batch::{self, Batching};
use crate::buffer::{AppendError, BufferError, DiskBuffer, Record};
use crate::buffer::{BufferConfig, DEFAULT_BUFFER_MAX_BYTES};
use crate::cadence::RemoteConfig;
use crate::cadence::{Cadence, CadenceError};
use crate::clock::{Clock, ClockSource, EARLIEST_PLAUSIBLE, kernel_synchronised};
use crate::source::{Fix, FixTime, Source};
use crate::source::{SimConfig, SourceConfig};
use crate::status::{AgentHandle, AgentStatus, SettingsStatus, StatusCell, write_status_file};
use crate::transport::TransportConfig;
use crate::transport::{
    CloudEvent, Connection, ConnectionEnd, Dialer, LinkEvent, TransportError, event_topic,
};
use crate::twin::{Control, DEFAULT_REPORTED_MIN_INTERVAL};
use link::Link;

/// Everything one agent needs to run.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The device id: the MQTT client id and the `deviceId` of every message.
    pub device_id: String,
    /// Where positions come from.
    pub source: SourceConfig,
    /// How often the latest fix becomes a message.
    pub report_interval: Duration,
    /// How often messages are published: `None` (or the report interval) publishes every
    /// sample alone; a longer interval publishes the samples since the last publish in one
    /// batch.
    pub publish_every: Option<Duration>,
    /// A fix older than this is no fix (the interval is skipped and counted).
    pub max_fix_age: Duration,
    /// The board clock is corrected when GPS time differs from it by more than this.
    pub clock_max_skew: Duration,
    /// The store-and-forward buffer on disk.
    pub buffer: BufferConfig,
    /// The MQTT connection.
    pub transport: TransportConfig,
    /// Backlog messages sent per second at most while live positions keep flowing.
    pub backlog_rate: f64,
    /// Where to write the status as JSON after every interval, if anywhere.
    pub status_file: Option<PathBuf>,
    /// Whether the device twin may override `report_interval` and `publish_every` (IoT Hub
    /// only).
    pub remote_config: RemoteConfig,
    /// Least time between two reports of the agent's state in the twin.
    pub reported_min_interval: Duration,
}

impl AgentConfig {
    /// A configuration for a simulated drone publishing over plain MQTT to
    /// `host:port`, buffering in `buffer_dir`, with the defaults of every other setting.
    /// The starting point of tests and of fleet simulations.
    pub fn simulated(device_id: &str, host: &str, port: u16, buffer_dir: PathBuf) -> AgentConfig {
        AgentConfig {
            device_id: device_id.to_owned(),
            source: SourceConfig::Sim(SimConfig::default()),
            report_interval: Duration::from_secs(5),
            publish_every: None,
            max_fix_age: Duration::from_secs(10),
            clock_max_skew: DEFAULT_CLOCK_MAX_SKEW,
            buffer: BufferConfig {
                dir: buffer_dir,
                max_bytes: DEFAULT_BUFFER_MAX_BYTES,
                fsync: true,
            },
            transport: TransportConfig::plain(host, port),
            backlog_rate: DEFAULT_BACKLOG_RATE,
            status_file: None,
            remote_config: RemoteConfig::On,
            reported_min_interval: DEFAULT_REPORTED_MIN_INTERVAL,
        }
    }
}

/// The default bound on the board clock's disagreement with GPS time.
pub const DEFAULT_CLOCK_MAX_SKEW: Duration = Duration::from_secs(2);

/// The default backlog drain rate, messages per second.
pub const DEFAULT_BACKLOG_RATE: f64 = 20.0;

/// Why an agent cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The device id is not a valid IoT Hub device id.
    #[error("device id: {0}")]
    DeviceId(#[from] telemetry::wire::DeviceIdError),
    /// The buffer directory cannot be used.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// The transport cannot be set up.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The report and publish intervals cannot work together.
    #[error(transparent)]
    Cadence(#[from] CadenceError),
    /// A timing setting cannot work.
    #[error("{0}")]
    Timing(&'static str),
}

/// What an agent did, returned when it stops.
#[derive(Debug, Clone)]
pub struct AgentReport {
    /// The status at the end.
    pub status: AgentStatus,
    /// Why it stopped.
    pub ended: ConnectionEnd,
}

/// An agent ready to run: configuration checked, buffer opened.
#[derive(Debug)]
pub struct Agent {
    config: AgentConfig,
    status: StatusCell,
    clock: Clock,
    buffer: DiskBuffer,
    /// Records the disk refused, kept in memory until acknowledged or their link ends.
    unbuffered: HashSet<u64>,
    /// The samples waiting for the next batch, when publishing in batches.
    batching: Option<Batching>,
    /// The report and publish intervals in effect.
    cadence: Cadence,
    /// The device twin and direct methods, on IoT Hub.
    control: Option<Control>,
}

impl Agent {
    /// Checks the device id and opens the buffer (reporting damaged records it finds).
    pub fn new(config: AgentConfig) -> Result<Agent, AgentError> {
        telemetry::wire::check_device_id(&config.device_id)?;
        let local = Cadence::new(config.report_interval, config.publish_every)?;
        if !(config.backlog_rate.is_finite() && config.backlog_rate >= 0.01) {
            return Err(AgentError::Timing(
                "the backlog rate must be at least 0.01 messages per second",
            ));
        }
        let buffer = DiskBuffer::open(&config.buffer)?;
        let status = StatusCell::new(&config.device_id);
        status.update(|s| s.source = Some(config.source.kind()));
        let clock = Clock::new(config.clock_max_skew);
        // The twin and methods exist on IoT Hub only.
        let control = config.transport.auth.hub_host().is_some().then(|| {
            Control::new(
                local,
                config.remote_config,
                &config.buffer.dir,
                config.reported_min_interval,
                config.max_fix_age,
            )
        });
        let cadence = control.as_ref().map_or(local, Control::cadence);
        let mut agent = Agent {
            config,
            status,
            clock,
            buffer,
            unbuffered: HashSet::new(),
            batching: None,
            cadence,
            control,
        };
        agent.set_batching(cadence);
        agent.refresh_status();
        Ok(agent)
    }

    /// A handle to the agent's status, valid while and after it runs.
    pub fn handle(&self) -> AgentHandle {
        self.status.handle()
    }

    /// Runs until `shutdown` is cancelled; then syncs the buffer and returns the report.
    /// Failures while running (disk, network, source) are logged, counted and retried;
    /// they do not end the agent, except the hub refusing the credentials as often in a row
    /// as the transport is told to bear ([`ConnectionEnd::CredentialsRefused`]).
    pub async fn run(self, shutdown: CancellationToken) -> Result<AgentReport, AgentError> {
        let (events_tx, mut events) = mpsc::channel(64);
        let dialer = Dialer::new(
            self.config.transport.clone(),
            self.config.device_id.clone(),
            self.clock.clone(),
        )?;
        let connection = Connection::new(dialer, self.status.clone(), events_tx);
        let connection_stop = shutdown.child_token();
        let connection_task =
            AbortOnDropHandle::new(tokio::spawn(connection.run(connection_stop.clone())));
        let source = Source::start(&self.config.source, &self.status, &self.clock, &shutdown);
        let mut reports = tokio::time::interval(self.cadence.report_interval());
        reports.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut drain =
            tokio::time::interval(Duration::from_secs_f64(1.0 / self.config.backlog_rate));
        drain.set_missed_tick_behavior(MissedTickBehavior::Delay);

        let mut agent = self;
        let mut link: Option<Link> = None;
        let mut connection_task = connection_task;
        let mut ended = ConnectionEnd::Stopped;
        loop {
            let backlog = link.as_ref().is_some_and(|l| l.backlog_slot(&agent));
            let wake = agent
                .control
                .as_ref()
                .and_then(|c| c.wake_at(Instant::now()));
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                end = &mut connection_task => {
                    ended = end.unwrap_or(ConnectionEnd::Stopped);
                    break;
                }
                Some(event) = events.recv() => {
                    if let Some(cadence) = agent.on_event(&mut link, &source, event) {
                        agent.set_cadence(cadence, link.as_mut());
                        reports = reports_every(cadence.report_interval(), Instant::now());
                    }
                }
                _ = reports.tick() => agent.report(&source, link.as_mut()),
                () = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {}
                _ = drain.tick(), if backlog => {
                    if let Some(link) = link.as_mut() {
                        agent.send_backlog(link);
                    }
                }
            }
            agent.refresh_status();
            agent.flush_control();
        }
        connection_stop.cancel();
        // The connection task ends at its next await; waiting keeps its final status.
        if !connection_task.is_finished() {
            let _ = connection_task.await;
        }
        agent.lose_unbuffered();
        if let Err(err) = agent.buffer.sync() {
            tracing::error!(%err, "buffer sync at shutdown failed");
        }
        agent.refresh_status();
        agent.write_status_file();
        Ok(AgentReport {
            status: agent.status.handle().status(),
            ended,
        })
    }

    /// Takes this interval's sample and publishes what is due: the sample alone, or the
    /// batch it completes.
    fn report(&mut self, source: &Source, link: Option<&mut Link>) {
        let record = self.sample(source);
        let now = Instant::now();
        let due = match self.batching.as_mut() {
            None => record.map(|record| vec![record]),
            Some(batching) => {
                if let Some(record) = record {
                    batching.hold(record, now);
                }
                batching.due(now).then(|| batching.take())
            }
        };
        if let Some(records) = due {
            match link {
                Some(link) => {
                    link.live.push_back(records);
                    self.pump(link);
                }
                // Buffered records go with the backlog of the next link.
                None => self.lose_unbuffered(),
            }
        }
        self.write_status_file();
    }

    /// The record of this interval, if there is a fix and a time for it.
    fn sample(&mut self, source: &Source) -> Option<Record> {
        let Some(fix) = source.latest(Instant::now(), self.config.max_fix_age) else {
            self.status.update(|s| s.no_fix += 1);
            return None;
        };
        let Some(ts) = self.stamp(&fix) else {
            if self.status.handle().status().no_time == 0 {
                tracing::warn!(
                    "the board clock reads before {EARLIEST_PLAUSIBLE} and the source gives no GPS time: no message until one of them can be trusted (counted as no_time)"
                );
            }
            self.status.update(|s| s.no_time += 1);
            return None;
        };
        self.store(&fix, ts)
    }

    /// The time to publish for `fix`, if a clock vouches for it; notes which one did.
    fn stamp(&self, fix: &Fix) -> Option<DateTime<Utc>> {
        let synchronised = kernel_synchronised();
        let stamped = match fix.time {
            FixTime::Gps(gps) => Some((gps, ClockSource::Gps)),
            FixTime::Board(board) => self.clock.stamp_board(board, synchronised),
        };
        let offset_ms = self.clock.offset().map(|o| o.num_milliseconds());
        self.status.update(|s| {
            s.clock.last = stamped.map(|(_, source)| source);
            s.clock.board_offset_ms = offset_ms;
            s.clock.board_synchronised = synchronised;
        });
        stamped.map(|(ts, _)| ts)
    }

    /// Encodes `fix` taken at `ts` as the next message and appends it to the buffer.
    fn store(&mut self, fix: &Fix, ts: DateTime<Utc>) -> Option<Record> {
        let position = fix.position(&self.config.device_id, self.buffer.next_id(), ts);
        let payload = match position.encode() {
            Ok(payload) => payload,
            Err(err) => {
                tracing::warn!(%err, "fix dropped: not a valid position");
                self.status.update(|s| s.dropped.invalid += 1);
                return None;
            }
        };
        self.status.update(|s| s.generated += 1);
        // The record's creation time (the message's `iothub-creation-time-utc`) is the
        // position's: the board clock may be wrong.
        match self.buffer.append(ts.timestamp_millis(), payload) {
            Ok(record) => Some(record),
            Err(AppendError { error, record }) => {
                tracing::error!(%error, "the buffer cannot be written: the message is sent from memory only");
                self.status.update(|s| {
                    s.unbuffered += 1;
                    s.last_error = Some(error.to_string());
                });
                self.unbuffered.insert(record.id);
                Some(record)
            }
        }
    }

    /// Applies a link event; the new cadence if the twin changed it.
    fn on_event(
        &mut self,
        link: &mut Option<Link>,
        source: &Source,
        event: LinkEvent,
    ) -> Option<Cadence> {
        match event {
            LinkEvent::Up {
                link: id,
                publisher,
            } => {
                let mut fresh = Link::new(id, publisher, self.config.transport.max_inflight);
                // The newest position first, so the fleet map is current at once: in the
                // batch being gathered, if any.
                let held = self.batching.as_mut().map(Batching::take);
                if let Some(held) = held.filter(|held| !held.is_empty()) {
                    fresh.live.push_back(held);
                } else if let Some(newest) = self.buffer.newest_pending() {
                    if let Some(record) = self.read(newest) {
                        fresh.live.push_back(vec![record]);
                    }
                }
                self.pump(&mut fresh);
                *link = Some(fresh);
            }
            LinkEvent::Down { link: id } => {
                if let Some(control) = self.control.as_mut() {
                    control.link_down(id);
                }
                if link.as_ref().is_some_and(|l| l.id == id) {
                    *link = None;
                    self.lose_unbuffered();
                }
            }
            LinkEvent::Cloud {
                link: id,
                event: CloudEvent::Method(request),
            } => {
                let current = link.as_mut().filter(|l| l.id == id);
                let answer = self.answer(&request, source, current);
                if let Some(control) = &self.control {
                    control.answer(id, &request.rid, &answer);
                }
            }
            LinkEvent::Cloud { link: id, event } => {
                return self
                    .control
                    .as_mut()
                    .and_then(|control| control.on_event(id, event, Instant::now()));
            }
            LinkEvent::Acked {
                link: id,
                record: record_id,
            } => {
                let link = link.as_mut().filter(|l| l.id == id)?;
                let records = link.acked(record_id);
                for &record in &records {
                    self.unbuffered.remove(&record);
                    if let Err(err) = self.buffer.ack(record) {
                        tracing::error!(%err, "acknowledgement not recorded");
                    }
                }
                self.status.update(|s| s.acked += records.len() as u64);
                self.pump(link);
            }
        }
        None
    }

    /// Publishes live messages while there is room in flight.
    fn pump(&mut self, link: &mut Link) {
        while link.in_flight() < link.max_inflight {
            let Some(records) = link.live.pop_front() else {
                break;
            };
            self.publish(link, records);
        }
    }

    /// Publishes the oldest backlog record not yet on this link: alone, or with batching
    /// in a batch with the records after it, up to 4 KB.
    fn send_backlog(&mut self, link: &mut Link) {
        let before = self.batching.as_ref().and_then(Batching::first_held);
        let mut records = Vec::new();
        while let Some(id) = link.next_backlog(&self.buffer, before) {
            let Some(record) = self.read(id) else {
                link.backlog_from = id + 1;
                continue;
            };
            if !records.is_empty() && !batch::fits(&self.config.device_id, &records, &record) {
                break;
            }
            link.backlog_from = id + 1;
            records.push(record);
            if self.batching.is_none() {
                break;
            }
        }
        if !records.is_empty() {
            self.publish(link, records);
        }
    }

    fn read(&mut self, id: u64) -> Option<Record> {
        match self.buffer.read(id) {
            Ok(record) => record,
            Err(err) => {
                tracing::error!(%err, id, "buffered message cannot be read");
                self.status.update(|s| s.last_error = Some(err.to_string()));
                None
            }
        }
    }

    /// Publishes `records` (oldest first) in one message, leaving out those acknowledged
    /// or already on this link.
    fn publish(&mut self, link: &mut Link, mut records: Vec<Record>) {
        records.retain(|r| {
            (self.buffer.is_pending(r.id) || self.unbuffered.contains(&r.id)) && !link.carries(r.id)
        });
        let (Some(first), Some(newest)) = (records.first(), records.last()) else {
            return;
        };
        let created = DateTime::from_timestamp_millis(newest.created_ms).unwrap_or_default();
        let topic = event_topic(&self.config.device_id, created);
        let payload = batch::payload(&self.config.device_id, &records);
        if link.publisher.publish(first.id, topic, payload) {
            link.carry(first.id, records[1..].iter().map(|r| r.id).collect());
            self.status.update(|s| s.sent += records.len() as u64);
        }
    }

    /// Counts the records held only in memory as lost: no link will acknowledge them.
    fn lose_unbuffered(&mut self) {
        if self.unbuffered.is_empty() {
            return;
        }
        let lost = self.unbuffered.len() as u64;
        tracing::error!(
            lost,
            "messages the disk refused were not acknowledged: lost"
        );
        self.status.update(|s| s.dropped.write_failed += lost);
        self.unbuffered.clear();
    }

    fn refresh_status(&self) {
        let stats = self.buffer.stats();
        let next_seq = self.buffer.next_id();
        let now_ms = self.clock.now().timestamp_millis();
        let oldest_unsent_age_ms = self
            .buffer
            .oldest_pending_created_ms()
            .map(|created| u64::try_from(now_ms.saturating_sub(created)).unwrap_or(0));
        let settings = SettingsStatus::new(
            self.cadence,
            self.config.remote_config,
            self.control.as_ref().and_then(Control::desired_version),
        );
        self.status.update(|s| {
            s.oldest_unsent_age_ms = oldest_unsent_age_ms;
            s.settings = settings;
            s.buffer_depth = stats.depth;
            s.buffer_bytes = stats.bytes;
            s.dropped.buffer_full = stats.dropped_full;
            s.dropped.corrupt = stats.corrupt;
            s.next_seq = next_seq;
        });
    }

    fn write_status_file(&self) {
        if let Some(path) = &self.config.status_file {
            self.refresh_status();
            if let Err(err) = write_status_file(path, &self.status.handle().status()) {
                tracing::warn!(%err, path = %path.display(), "status file not written");
            }
        }
    }
}

/// Report ticks every `interval`, the first one `interval` after `now`.
fn reports_every(interval: Duration, now: Instant) -> tokio::time::Interval {
    let mut reports = tokio::time::interval_at(now + interval, interval);
    reports.set_missed_tick_behavior(MissedTickBehavior::Delay);
    reports
}

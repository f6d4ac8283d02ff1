//! Position sources: where the latest fix comes from.
//!
//! - [`mavlink`]: the flight stack's MAVLink (UDP, TCP, serial), one vehicle of the link.
//! - [`gpsd`]: `TPV` reports from gpsd over TCP.
//! - [`sim`]: a simulated drone flying a route; computed on demand, no task.
//!
//! MAVLink and gpsd run as a task that keeps the latest fix in a watch channel; a source
//! that fails or ends is restarted after a backoff delay, the reason logged and counted
//! (`source_restarts`). A "no fix" report clears the latest fix.
//!
//! A fix carries the GNSS health its source reports ([`telemetry::Gnss`]: fix type,
//! satellites, horizontal accuracy), and only that: MAVLink from `GPS_RAW_INT`, gpsd from
//! `TPV` and `SKY`, the simulator a fixed simulated 3D fix.

mod config;
pub mod gpsd;
pub mod mavlink;
pub mod sim;

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, EARLIEST_PLAUSIBLE};
use crate::status::StatusCell;
pub use config::SourceConfig;
pub use mavlink::{MavlinkAddress, MavlinkConfig, SigningKey};
use retry_backoff::{Backoff, BackoffConfig};
pub use sim::{SimConfig, SimRoute};

/// When a fix was taken, and by which clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FixTime {
    /// GPS time from the flight stack (MAVLink `SYSTEM_TIME`, gpsd's `time`).
    Gps(DateTime<Utc>),
    /// The board clock when the fix arrived; the agent's [`Clock`] decides whether it
    /// can be vouched for.
    Board(DateTime<Utc>),
}

/// One position fix.
#[derive(Debug, Clone, PartialEq)]
pub struct Fix {
    /// When the fix was taken.
    pub time: FixTime,
    /// Latitude, degrees.
    pub lat: f64,
    /// Longitude, degrees.
    pub lon: f64,
    /// Altitude (MSL), metres.
    pub alt_m: Option<f64>,
    /// Heading, degrees from north.
    pub heading_deg: Option<f64>,
    /// Ground speed, m/s.
    pub speed_mps: Option<f64>,
    /// Battery charge, percent.
    pub battery_pct: Option<u8>,
    /// The GNSS health the source reported with the fix.
    pub gnss: telemetry::Gnss,
}

impl Fix {
    /// This fix as the position report number `seq` of the drone `device_id`, taken at
    /// `ts` (the time the agent's [`Clock`] vouches for).
    pub fn position(&self, device_id: &str, seq: u64, ts: DateTime<Utc>) -> telemetry::Position {
        telemetry::Position {
            device_id: device_id.to_owned(),
            seq,
            ts,
            lat: self.lat,
            lon: self.lon,
            alt_m: self.alt_m,
            heading_deg: self.heading_deg,
            speed_mps: self.speed_mps,
            battery_pct: self.battery_pct,
            gnss: self.gnss,
        }
    }
}

/// Why a source stopped; it is restarted after a backoff delay.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// An I/O error (connect, read).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer sent something unusable.
    #[error("{0}")]
    Protocol(String),
    /// The peer closed the connection.
    #[error("the connection was closed")]
    Closed,
}

/// The latest fix of a feed source and when it arrived.
pub(crate) type Latest = Option<(Instant, Fix)>;

/// A running position source.
#[derive(Debug)]
pub struct Source {
    inner: Inner,
    status: StatusCell,
}

#[derive(Debug)]
enum Inner {
    Sim {
        route: SimRoute,
        started: Instant,
    },
    Feed {
        rx: watch::Receiver<Latest>,
        // Aborts the feed task when the source is dropped.
        _task: tokio_util::task::AbortOnDropHandle<()>,
    },
}

/// Restart policy of feed sources.
const SOURCE_BACKOFF: BackoffConfig = BackoffConfig {
    base: Duration::from_millis(500),
    cap: Duration::from_secs(30),
};

impl Source {
    /// Starts the configured source (a task for MAVLink and gpsd, which ends with
    /// `shutdown` or when the source is dropped).
    pub(crate) fn start(
        config: &SourceConfig,
        status: &StatusCell,
        clock: &Clock,
        shutdown: &CancellationToken,
    ) -> Source {
        let inner = match config {
            SourceConfig::Sim(sim) => Inner::Sim {
                route: SimRoute::new(sim),
                started: Instant::now(),
            },
            SourceConfig::Mavlink(mavlink) => {
                let mavlink = mavlink.clone();
                let memory = mavlink::LinkMemory::default();
                feed("mavlink", status, clock, shutdown, move |tx| {
                    mavlink::run(mavlink.clone(), memory.clone(), tx)
                })
            }
            SourceConfig::Gpsd { address } => {
                let address = address.clone();
                feed("gpsd", status, clock, shutdown, move |tx| {
                    gpsd::run(address.clone(), tx)
                })
            }
        };
        Source {
            inner,
            status: status.clone(),
        }
    }

    /// Starts the configured source on its own, e.g. to check it delivers fixes; its
    /// task ends when the source is dropped.
    pub fn probe(config: &SourceConfig, clock: &Clock) -> Source {
        Source::start(
            config,
            &StatusCell::new("probe"),
            clock,
            &CancellationToken::new(),
        )
    }

    /// What the MAVLink source has seen on its link, if it is one.
    pub fn mavlink_status(&self) -> Option<crate::status::MavlinkStatus> {
        self.status.handle().status().mavlink
    }

    /// Waits for the first fix.
    pub async fn first_fix(&self) -> Fix {
        match &self.inner {
            Inner::Sim { route, started } => route.fix_after(started.elapsed(), Utc::now()),
            Inner::Feed { rx, .. } => {
                let mut rx = rx.clone();
                match rx.wait_for(Option::is_some).await {
                    Ok(latest) => latest
                        .as_ref()
                        .map(|(_, fix)| fix.clone())
                        .expect("checked"),
                    // The task holds the sender while the source lives.
                    Err(_) => std::future::pending().await,
                }
            }
        }
    }

    /// The latest fix if it arrived within `max_age` of `now`.
    pub fn latest(&self, now: Instant, max_age: Duration) -> Option<Fix> {
        match &self.inner {
            Inner::Sim { route, started } => {
                self.status.fix_arrived(now);
                Some(route.fix_after(now - *started, Utc::now()))
            }
            Inner::Feed { rx, .. } => rx
                .borrow()
                .as_ref()
                .filter(|(at, _)| now.saturating_duration_since(*at) <= max_age)
                .map(|(_, fix)| fix.clone()),
        }
    }
}

/// Where a feed source puts what it reads.
#[derive(Debug, Clone)]
pub(crate) struct FixSink {
    tx: watch::Sender<Latest>,
    status: StatusCell,
    clock: Clock,
}

impl FixSink {
    /// A new fix arrived.
    pub(crate) fn fix(&self, mut fix: Fix) {
        if let FixTime::Gps(gps) = fix.time {
            if gps < EARLIEST_PLAUSIBLE {
                // A receiver's week-rollover bug: the board clock decides instead.
                fix.time = FixTime::Board(Utc::now());
            } else {
                self.gps_time(gps);
            }
        }
        let now = Instant::now();
        self.status.fix_arrived(now);
        self.tx.send_replace(Some((now, fix)));
    }

    /// The source reports GPS time `gps` as of now.
    pub(crate) fn gps_time(&self, gps: DateTime<Utc>) {
        self.clock.observe_gps(gps, Utc::now());
    }

    /// The status every part of the agent updates.
    pub(crate) fn status(&self) -> &StatusCell {
        &self.status
    }

    /// Changes the latest fix in place if it arrived at most `max_age` ago (a report that
    /// completes the fix it follows).
    pub(crate) fn update_recent(&self, max_age: Duration, change: impl FnOnce(&mut Fix)) {
        self.tx.send_if_modified(|latest| match latest {
            Some((at, fix)) if at.elapsed() <= max_age => {
                change(fix);
                true
            }
            _ => false,
        });
    }

    /// The source reports that it has no fix.
    pub(crate) fn no_fix(&self) {
        self.tx.send_replace(None);
    }
}

/// Runs a feed source in a task, restarting it with backoff when it fails or ends.
fn feed<F, Fut>(
    name: &'static str,
    status: &StatusCell,
    clock: &Clock,
    shutdown: &CancellationToken,
    run: F,
) -> Inner
where
    F: Fn(FixSink) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), SourceError>> + Send,
{
    let (tx, rx) = watch::channel(None);
    let sink = FixSink {
        tx,
        status: status.clone(),
        clock: clock.clone(),
    };
    let shutdown = shutdown.clone();
    let task = tokio::spawn(async move {
        let mut backoff = Backoff::new(SOURCE_BACKOFF);
        loop {
            let started = Instant::now();
            let outcome = tokio::select! {
                () = shutdown.cancelled() => return,
                outcome = run(sink.clone()) => outcome,
            };
            let reason = match outcome {
                Ok(()) => "the source ended".to_owned(),
                Err(err) => err.to_string(),
            };
            // A source that ran a while before failing starts over at the first window.
            if started.elapsed() > SOURCE_BACKOFF.cap {
                backoff.reset();
            }
            let delay = backoff.next_delay();
            tracing::warn!(source = name, %reason, ?delay, "position source failed; restarting");
            sink.no_fix();
            sink.status.update(|s| {
                s.source_restarts += 1;
                s.last_error = Some(format!("{name}: {reason}"));
            });
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
        }
    });
    Inner::Feed {
        rx,
        _task: tokio_util::task::AbortOnDropHandle::new(task),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink() -> (FixSink, watch::Receiver<Latest>, Clock) {
        let (tx, rx) = watch::channel(None);
        let clock = Clock::new(Duration::from_secs(2));
        let sink = FixSink {
            tx,
            status: StatusCell::new("drone-7"),
            clock: clock.clone(),
        };
        (sink, rx, clock)
    }

    fn fix(time: FixTime) -> Fix {
        Fix {
            time,
            lat: 47.6,
            lon: -122.3,
            alt_m: None,
            heading_deg: None,
            speed_mps: None,
            battery_pct: None,
            gnss: telemetry::Gnss::default(),
        }
    }

    #[test]
    fn gps_time_corrects_the_clock_and_a_rolled_over_one_does_not() {
        let (sink, rx, clock) = sink();
        // A receiver with a week-rollover bug: 1024 weeks early.
        sink.fix(fix(FixTime::Gps("2006-04-12T10:00:00Z".parse().unwrap())));
        let latest = rx.borrow().clone().unwrap().1;
        assert!(matches!(latest.time, FixTime::Board(_)), "{latest:?}");
        assert_eq!(clock.offset(), None);
        let gps = Utc::now() + chrono::TimeDelta::hours(2);
        sink.fix(fix(FixTime::Gps(gps)));
        assert_eq!(rx.borrow().clone().unwrap().1.time, FixTime::Gps(gps));
        let offset = clock.offset().unwrap();
        assert!((offset.num_seconds() - 7200).abs() <= 1, "{offset:?}");
    }
}

//! Whether a position is fresh enough to write: the one staleness rule of the project.
//!
//! The reference time is the hub's enqueued time when the source knows it (it comes from
//! the hub's clock, not the drone's), else the device time. A position whose reference
//! time is more than [`StalenessPolicy::stale_after`] before now is stale. Independently,
//! a device time more than [`StalenessPolicy::future_tolerance`] after now is flagged
//! [`Freshness::FromFuture`]: such a position would win "newest wins" against every later
//! report of the drone, so it must not be written. Lateness is `now - reference`, zero
//! when the reference lies ahead of now.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The staleness rule's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StalenessPolicy {
    /// Positions later than this are stale. Default: 5 minutes.
    pub stale_after: Duration,
    /// Device times up to this far ahead of now are tolerated (clock skew). Default: 2 minutes.
    pub future_tolerance: Duration,
}

impl Default for StalenessPolicy {
    fn default() -> Self {
        StalenessPolicy {
            stale_after: Duration::from_secs(5 * 60),
            future_tolerance: Duration::from_secs(2 * 60),
        }
    }
}

/// The verdict on one position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Recent enough to write; `lateness` is how old the reference time is.
    Fresh {
        /// `now - reference time`, at least zero.
        lateness: Duration,
    },
    /// Too old: to be dropped (and counted).
    Stale {
        /// `now - reference time`.
        lateness: Duration,
    },
    /// The device time is further ahead of now than the tolerance.
    FromFuture {
        /// `device time - now`.
        ahead: Duration,
    },
}

impl Freshness {
    /// Whether the position should be written.
    pub fn is_fresh(&self) -> bool {
        matches!(self, Freshness::Fresh { .. })
    }

    /// The lateness to report in metrics (zero for a position from the future).
    pub fn lateness(&self) -> Duration {
        match *self {
            Freshness::Fresh { lateness } | Freshness::Stale { lateness } => lateness,
            Freshness::FromFuture { .. } => Duration::ZERO,
        }
    }
}

impl StalenessPolicy {
    /// Judges a position with `device_time`, seen at `now`, enqueued by the hub at
    /// `enqueued` when the source knows it.
    pub fn judge(
        &self,
        now: DateTime<Utc>,
        device_time: DateTime<Utc>,
        enqueued: Option<DateTime<Utc>>,
    ) -> Freshness {
        let ahead = non_negative(device_time - now);
        if ahead > self.future_tolerance {
            return Freshness::FromFuture { ahead };
        }
        let lateness = non_negative(now - enqueued.unwrap_or(device_time));
        if lateness > self.stale_after {
            Freshness::Stale { lateness }
        } else {
            Freshness::Fresh { lateness }
        }
    }
}

/// A signed time difference as a `Duration`, negative ones as zero.
fn non_negative(delta: chrono::TimeDelta) -> Duration {
    delta.to_std().unwrap_or(Duration::ZERO)
}

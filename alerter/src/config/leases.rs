//! The leases and the change feed, resolved: how often leases are renewed and when they
//! expire (`ALERT_LEASE_INTERVAL`, `ALERT_LEASE_EXPIRY`), how often a quiet range is asked
//! again (`ALERT_FEED_POLL`), where a new range starts (`ALERT_FEED_START`) and the
//! instance's name in the leases (`ALERT_INSTANCE`).

use std::time::Duration;

use cosmos::FeedPosition;
use serde::Deserialize;
use settings::{ConfigError, DurationSetting};

/// Where a range without a continuation starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeedStart {
    /// Only changes made from the lease's first read on.
    #[default]
    Now,
    /// Every document in the container (each drone's latest position).
    Beginning,
}

impl From<FeedStart> for FeedPosition {
    fn from(start: FeedStart) -> FeedPosition {
        match start {
            FeedStart::Now => FeedPosition::Now,
            FeedStart::Beginning => FeedPosition::Beginning,
        }
    }
}

/// The renewal interval (default 10 s) and the expiry (default 60 s), the expiry at least
/// twice the interval.
pub fn lease_timing(
    interval: Option<DurationSetting>,
    expiry: Option<DurationSetting>,
) -> Result<(Duration, Duration), ConfigError> {
    let interval = interval.map_or(Duration::from_secs(10), |d| d.0);
    let expiry = expiry.map_or(Duration::from_secs(60), |d| d.0);
    if expiry < interval * 2 {
        return Err(ConfigError::Invalid {
            name: "ALERT_LEASE_EXPIRY",
            message: format!(
                "must be at least twice ALERT_LEASE_INTERVAL ({interval:?}), or a live owner's lease expires between two renewals: write {:?} or more",
                interval * 2
            ),
        });
    }
    Ok((interval, expiry))
}

/// How often a quiet range's feed is asked again: 1 s by default, at least 50 ms.
pub fn feed_poll(given: Option<DurationSetting>) -> Result<Duration, ConfigError> {
    let poll = given.map_or(Duration::from_secs(1), |d| d.0);
    if poll < Duration::from_millis(50) {
        return Err(ConfigError::Invalid {
            name: "ALERT_FEED_POLL",
            message: "must be at least 50ms".into(),
        });
    }
    Ok(poll)
}

/// The instance's name in the leases: as given, or the host name and the process id.
pub fn instance(given: Option<String>) -> String {
    given.unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "alerter".into());
        format!("{host}-{}", std::process::id())
    })
}

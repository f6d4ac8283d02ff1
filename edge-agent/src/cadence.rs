//! The agent's cadence: how often it samples (`REPORT_INTERVAL`) and how often it publishes
//! (`PUBLISH_EVERY`), and the one rule both sources of these settings are held to: the local
//! configuration ([`crate::config`]) and the device twin ([`crate::twin`]), and whether the
//! twin may change them ([`RemoteConfig`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The longest report or publish interval: a day (longer would be a drone that never
/// reports, and timers that far out risk overflowing the clock).
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// A checked pair of intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    report_interval: Duration,
    publish_every: Option<Duration>,
}

/// Which of the two intervals a [`CadenceError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// `REPORT_INTERVAL`, the twin's `reportInterval`.
    Report,
    /// `PUBLISH_EVERY`, the twin's `publishEvery`.
    Publish,
}

/// Why a cadence cannot work. The message says what to set instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CadenceError {
    /// A zero report interval.
    #[error("the report interval must be longer than zero")]
    ZeroReport,
    /// An interval above [`MAX_INTERVAL`].
    #[error("{value:?} is longer than the longest interval, 24h")]
    TooLong {
        /// The interval at fault.
        interval: Interval,
        /// Its value.
        value: Duration,
    },
    /// A publish interval shorter than the report interval.
    #[error(
        "{publish_every:?} is shorter than the report interval ({report_interval:?}): set it to the report interval to publish every sample, or to a multiple of it (e.g. 30s) to publish them in batches"
    )]
    PublishShorter {
        /// The publish interval.
        publish_every: Duration,
        /// The report interval.
        report_interval: Duration,
    },
}

impl CadenceError {
    /// The interval at fault.
    pub fn interval(&self) -> Interval {
        match self {
            CadenceError::ZeroReport => Interval::Report,
            CadenceError::TooLong { interval, .. } => *interval,
            CadenceError::PublishShorter { .. } => Interval::Publish,
        }
    }
}

impl Cadence {
    /// Sampling every `report_interval`, publishing every `publish_every` (`None`: every
    /// sample alone), if that can work.
    pub fn new(
        report_interval: Duration,
        publish_every: Option<Duration>,
    ) -> Result<Cadence, CadenceError> {
        if report_interval.is_zero() {
            return Err(CadenceError::ZeroReport);
        }
        for (interval, value) in [
            (Interval::Report, Some(report_interval)),
            (Interval::Publish, publish_every),
        ] {
            if let Some(value) = value.filter(|v| *v > MAX_INTERVAL) {
                return Err(CadenceError::TooLong { interval, value });
            }
        }
        if let Some(publish_every) = publish_every.filter(|p| *p < report_interval) {
            return Err(CadenceError::PublishShorter {
                publish_every,
                report_interval,
            });
        }
        Ok(Cadence {
            report_interval,
            publish_every,
        })
    }

    /// How often the latest fix becomes a message.
    pub fn report_interval(&self) -> Duration {
        self.report_interval
    }

    /// How often messages are published, if not every sample alone.
    pub fn publish_every(&self) -> Option<Duration> {
        self.publish_every
    }

    /// The publish interval in effect: the report interval when every sample goes alone.
    pub fn publish_interval(&self) -> Duration {
        self.publish_every.unwrap_or(self.report_interval)
    }
}

/// Whether the twin may change the agent's settings (`REMOTE_CONFIG`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RemoteConfig {
    /// The twin's desired properties override the local settings.
    #[default]
    On,
    /// The local settings only: desired changes are refused (403).
    Off,
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_rule_names_the_interval_at_fault() {
        assert!(Cadence::new(5 * S, None).is_ok());
        assert!(Cadence::new(5 * S, Some(30 * S)).is_ok());
        assert_eq!(
            Cadence::new(Duration::ZERO, None).unwrap_err().interval(),
            Interval::Report
        );
        assert_eq!(
            Cadence::new(5 * S, Some(2 * S)).unwrap_err().interval(),
            Interval::Publish
        );
        assert_eq!(
            Cadence::new(MAX_INTERVAL + S, None).unwrap_err().interval(),
            Interval::Report
        );
        assert_eq!(
            Cadence::new(S, Some(MAX_INTERVAL + S))
                .unwrap_err()
                .interval(),
            Interval::Publish
        );
        assert_eq!(Cadence::new(2 * S, None).unwrap().publish_interval(), 2 * S);
    }
}

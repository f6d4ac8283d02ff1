//! The priority of a request under priority-based execution: `x-ms-cosmos-priority-level`,
//! `High` or `Low` as the SDKs spell it. A request without the header is high priority, as the
//! service treats it; when a partition's budget is spent, low-priority requests are throttled
//! first.

use serde::Deserialize;
use std::fmt;
use std::str::FromStr;

/// A request's priority level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Priority {
    /// Throttled after low-priority requests (the default).
    #[default]
    High,
    /// Throttled before high-priority requests.
    Low,
}

impl Priority {
    /// The header's value: `High` or `Low`.
    pub fn header_value(self) -> &'static str {
        match self {
            Priority::High => "High",
            Priority::Low => "Low",
        }
    }

    /// The priority a header value names (any case), `None` for anything else.
    pub fn from_header_value(value: &str) -> Option<Self> {
        [Priority::High, Priority::Low]
            .into_iter()
            .find(|p| p.header_value().eq_ignore_ascii_case(value.trim()))
    }
}

impl FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Priority::from_header_value(s)
            .ok_or_else(|| format!("'{s}' is not a priority: high or low"))
    }
}

impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.header_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_round_trip_in_any_case() {
        for p in [Priority::High, Priority::Low] {
            assert_eq!(Priority::from_header_value(p.header_value()), Some(p));
        }
        assert_eq!(Priority::from_header_value("low"), Some(Priority::Low));
        assert_eq!(Priority::from_header_value("HIGH"), Some(Priority::High));
        assert_eq!(Priority::from_header_value("urgent"), None);
        assert_eq!(Priority::default(), Priority::High);
        assert_eq!("low".parse::<Priority>(), Ok(Priority::Low));
        assert!("none".parse::<Priority>().is_err());
    }
}

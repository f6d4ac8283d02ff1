//! The settings of what a caller may hold and how long it may take: connections, header,
//! body and request times, a client's stall, the per-caller caps, the proxies whose
//! forwarded address is believed, and a track's pages and span.

use std::time::Duration;

use ipnet::IpNet;

use super::{ConfigError, DurationSetting};
use crate::serving::Serving;
use crate::track::request::{TrackLimits, duration_text};

/// What every connection is held to: `API_HEADER_TIMEOUT`, `API_STREAM_STALL`,
/// `API_MAX_CONNECTIONS`.
pub(super) fn serving(
    header_timeout: Option<DurationSetting>,
    stall: Option<DurationSetting>,
    max_connections: Option<usize>,
) -> Result<Serving, ConfigError> {
    let defaults = Serving::default();
    Ok(Serving {
        header_timeout: time_limit(
            "API_HEADER_TIMEOUT",
            header_timeout,
            defaults.header_timeout,
        )?,
        stall: time_limit("API_STREAM_STALL", stall, defaults.stall)?,
        max_connections: count(
            "API_MAX_CONNECTIONS",
            max_connections,
            defaults.max_connections,
            1_000_000,
        )?,
    })
}

/// A count from 1 to `max`, `default` when not given.
pub(super) fn count(
    name: &'static str,
    value: Option<usize>,
    default: usize,
    max: usize,
) -> Result<usize, ConfigError> {
    let value = value.unwrap_or(default);
    if !(1..=max).contains(&value) {
        return Err(ConfigError::Invalid {
            name,
            message: format!("must be from 1 to {max}"),
        });
    }
    Ok(value)
}

/// A time limit of at least 100ms, `default` when not given.
pub(super) fn time_limit(
    name: &'static str,
    value: Option<DurationSetting>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    let value = value.map_or(default, DurationSetting::get);
    if value < Duration::from_millis(100) {
        return Err(ConfigError::Invalid {
            name,
            message: "must be at least 100ms (10s, 500ms)".into(),
        });
    }
    Ok(value)
}

/// What a track's pages are held to: `TRACK_PAGE_LIMIT` (at most `TRACK_MAX_PAGE_LIMIT`),
/// `TRACK_MAX_SPAN` (at least a minute).
pub(super) fn track_limits(
    page_limit: Option<usize>,
    max_page_limit: Option<usize>,
    max_span: Option<DurationSetting>,
) -> Result<TrackLimits, ConfigError> {
    let defaults = TrackLimits::default();
    let max_page_limit = count(
        "TRACK_MAX_PAGE_LIMIT",
        max_page_limit,
        defaults.max_page_limit,
        100_000,
    )?;
    let page_limit = page_limit.unwrap_or(defaults.page_limit.min(max_page_limit));
    if !(1..=max_page_limit).contains(&page_limit) {
        return Err(ConfigError::Invalid {
            name: "TRACK_PAGE_LIMIT",
            message: format!(
                "must be from 1 to TRACK_MAX_PAGE_LIMIT ({max_page_limit}); write a smaller \
                 TRACK_PAGE_LIMIT or a larger TRACK_MAX_PAGE_LIMIT"
            ),
        });
    }
    let max_span = max_span.map_or(defaults.max_span, DurationSetting::get);
    if max_span < Duration::from_secs(60) {
        return Err(ConfigError::Invalid {
            name: "TRACK_MAX_SPAN",
            message: format!(
                "must be at least 1m (24h, 90m), not {}",
                duration_text(max_span)
            ),
        });
    }
    Ok(TrackLimits {
        page_limit,
        max_page_limit,
        max_span,
    })
}

/// The proxies of `API_TRUSTED_PROXIES`: addresses or CIDR ranges, comma-separated.
pub(super) fn trusted_proxies(list: Option<&str>) -> Result<Vec<IpNet>, ConfigError> {
    let items = list.unwrap_or_default().split(',').map(str::trim);
    items
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<IpNet>()
                .or_else(|_| item.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| ConfigError::Invalid {
                    name: "API_TRUSTED_PROXIES",
                    message: format!(
                        "'{item}' is not an address or a CIDR range (10.0.0.5, 10.0.0.0/16, fd00::/8)"
                    ),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_are_addresses_or_ranges() {
        let nets = trusted_proxies(Some("10.0.0.5, 10.1.0.0/16,fd00::/8")).unwrap();
        assert_eq!(nets.len(), 3);
        assert!(nets[0].contains(&"10.0.0.5".parse::<std::net::IpAddr>().unwrap()));
        assert!(!nets[0].contains(&"10.0.0.6".parse::<std::net::IpAddr>().unwrap()));
        assert!(trusted_proxies(None).unwrap().is_empty());
        let err = trusted_proxies(Some("10.0.0.0/33"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("API_TRUSTED_PROXIES"), "{err}");
    }

    #[test]
    fn track_limits_hold_together() {
        assert_eq!(
            track_limits(None, None, None).unwrap(),
            TrackLimits::default()
        );
        let small = track_limits(None, Some(50), None).unwrap();
        assert_eq!((small.page_limit, small.max_page_limit), (50, 50));
        let err = track_limits(Some(200), Some(100), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("TRACK_PAGE_LIMIT"), "{err}");
        let short = Some("30s".parse().unwrap());
        let err = track_limits(None, None, short).unwrap_err().to_string();
        assert!(err.contains("TRACK_MAX_SPAN"), "{err}");
    }

    #[test]
    fn limits_are_checked() {
        assert_eq!(count("N", None, 4, 10).unwrap(), 4);
        assert!(count("N", Some(0), 4, 10).is_err());
        assert!(count("N", Some(11), 4, 10).is_err());
        let short = Some("50ms".parse().unwrap());
        assert!(time_limit("T", short, Duration::from_secs(1)).is_err());
        assert_eq!(
            time_limit("T", None, Duration::from_secs(10)).unwrap(),
            Duration::from_secs(10)
        );
    }
}

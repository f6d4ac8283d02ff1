//! A track route's parameters, checked: the span (`since`, `until`), `limit` and
//! `continuation`, held to the track's settings (`TRACK_PAGE_LIMIT`, `TRACK_MAX_PAGE_LIMIT`,
//! `TRACK_MAX_SPAN`).

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::continuation::Continuation;
use super::{Span, TrackRequest};

/// The span of a track when `since` is not given (or `TRACK_MAX_SPAN`, when shorter).
const DEFAULT_SPAN: Duration = Duration::from_secs(3600);

/// What a track's pages are held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackLimits {
    /// Positions a page holds when the request names no `limit` (`TRACK_PAGE_LIMIT`).
    pub page_limit: usize,
    /// Most positions a request may ask a page for (`TRACK_MAX_PAGE_LIMIT`).
    pub max_page_limit: usize,
    /// The longest span from `since` to `until` (`TRACK_MAX_SPAN`).
    pub max_span: Duration,
}

impl Default for TrackLimits {
    /// Pages of 1,000 positions, up to 10,000, over at most a day.
    fn default() -> Self {
        Self {
            page_limit: 1000,
            max_page_limit: 10_000,
            max_span: Duration::from_secs(24 * 3600),
        }
    }
}

/// A duration as the settings write it (`90m`, `2h`, `45s`, `1500ms`).
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        _ if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        _ if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        _ if ms % 1000 == 0 => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

/// A time parameter: an RFC 3339 time, or a duration back from `now` (`30m`, `2h`).
fn time(name: &str, text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    if let Ok(time) = text.parse::<DateTime<Utc>>() {
        return Ok(time);
    }
    text.parse::<settings::DurationSetting>()
        .ok()
        .and_then(|d| chrono::Duration::from_std(d.get()).ok())
        .and_then(|d| now.checked_sub_signed(d))
        .ok_or_else(|| {
            format!(
                "{name}: '{text}' is not an RFC 3339 time (2026-11-22T09:00:00Z) or a duration back from now (30m, 2h)"
            )
        })
}

fn limit(params: &HashMap<String, String>, limits: &TrackLimits) -> Result<usize, String> {
    let Some(text) = params.get("limit") else {
        return Ok(limits.page_limit);
    };
    let max = limits.max_page_limit;
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            format!("limit: '{text}' is not a whole number from 1 to {max} (TRACK_MAX_PAGE_LIMIT)")
        })
}

/// The span `since`..`until` names, `until` defaulting to `now`.
fn span(
    params: &HashMap<String, String>,
    now: DateTime<Utc>,
    limits: &TrackLimits,
) -> Result<Span, String> {
    let until = match params.get("until") {
        Some(text) => time("until", text, now)?,
        None => now,
    };
    let since = match params.get("since") {
        Some(text) => time("since", text, now)?,
        None => {
            until - chrono::Duration::from_std(DEFAULT_SPAN.min(limits.max_span)).expect("an hour")
        }
    };
    if since >= until {
        return Err("since: must be before until".into());
    }
    Ok(Span {
        since_ms: since.timestamp_millis(),
        until_ms: until.timestamp_millis(),
    })
}

/// The page `params` ask of `device_id`'s track, at `now`; why not, as the 400 says.
pub fn track_request(
    device_id: &str,
    params: &HashMap<String, String>,
    now: DateTime<Utc>,
    limits: &TrackLimits,
) -> Result<TrackRequest, String> {
    let limit = limit(params, limits)?;
    let (span, after) = match params.get("continuation") {
        Some(token) => {
            if params.contains_key("since") || params.contains_key("until") {
                return Err("continuation: it carries the span of the first page; leave out since and until".into());
            }
            let c = Continuation::decode(device_id, token).ok_or_else(|| {
                format!("continuation: not a token this route gave for drone '{device_id}'; start again without it")
            })?;
            (c.span, Some(c.after))
        }
        None => (span(params, now, limits)?, None),
    };
    let length =
        Duration::from_millis(u64::try_from(span.until_ms - span.since_ms).unwrap_or(u64::MAX));
    if length > limits.max_span {
        return Err(format!(
            "the span from since to until is {}, longer than TRACK_MAX_SPAN ({}): ask for a shorter span",
            duration_text(length),
            duration_text(limits.max_span)
        ));
    }
    Ok(TrackRequest {
        device_id: device_id.to_string(),
        span,
        after,
        limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use telemetry::PositionOrder;

    fn now() -> DateTime<Utc> {
        "2026-11-22T10:00:00Z".parse().unwrap()
    }

    fn ask(pairs: &[(&str, &str)]) -> Result<TrackRequest, String> {
        let params = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        track_request("d", &params, now(), &TrackLimits::default())
    }

    fn ms(text: &str) -> i64 {
        text.parse::<DateTime<Utc>>().unwrap().timestamp_millis()
    }

    #[test]
    fn the_span_is_the_last_hour_unless_since_or_until_say_otherwise() {
        let r = ask(&[]).unwrap();
        assert_eq!(r.span.since_ms, ms("2026-11-22T09:00:00Z"));
        assert_eq!(r.span.until_ms, ms("2026-11-22T10:00:00Z"));
        assert_eq!((r.limit, r.after), (1000, None));
        let r = ask(&[("since", "30m")]).unwrap();
        assert_eq!(r.span.since_ms, ms("2026-11-22T09:30:00Z"));
        let r = ask(&[("since", "2026-11-22T09:15:00Z"), ("until", "10m")]).unwrap();
        assert_eq!(r.span.since_ms, ms("2026-11-22T09:15:00Z"));
        assert_eq!(r.span.until_ms, ms("2026-11-22T09:50:00Z"));
        assert!(
            ask(&[("since", "yesterday")])
                .unwrap_err()
                .contains("since")
        );
        assert!(
            ask(&[("since", "5m"), ("until", "10m")])
                .unwrap_err()
                .contains("before until")
        );
    }

    #[test]
    fn a_span_over_the_limit_is_refused_naming_the_setting() {
        let err = ask(&[("since", "25h")]).unwrap_err();
        assert!(
            err.contains("TRACK_MAX_SPAN (24h)") && err.contains("25h"),
            "{err}"
        );
        assert!(ask(&[("since", "24h")]).is_ok());
    }

    #[test]
    fn limit_is_held_to_its_maximum() {
        assert_eq!(ask(&[("limit", "7")]).unwrap().limit, 7);
        for bad in ["0", "10001", "x"] {
            let err = ask(&[("limit", bad)]).unwrap_err();
            assert!(err.contains("TRACK_MAX_PAGE_LIMIT"), "{err}");
        }
    }

    #[test]
    fn a_continuation_carries_its_span_and_is_checked() {
        let span = Span {
            since_ms: ms("2026-11-22T08:00:00Z"),
            until_ms: ms("2026-11-22T08:30:00Z"),
        };
        let after = PositionOrder {
            device_time_ms: span.since_ms + 5,
            seq: 3,
        };
        let token = Continuation { span, after }.encode("d");
        let r = ask(&[("continuation", &token), ("limit", "5")]).unwrap();
        assert_eq!((r.span, r.after, r.limit), (span, Some(after), 5));
        assert!(
            ask(&[("continuation", "AAAA")])
                .unwrap_err()
                .contains("start again")
        );
        let err = ask(&[("continuation", &token), ("since", "1h")]).unwrap_err();
        assert!(err.contains("leave out since"), "{err}");
        // A token for a span longer than the setting allows (made before it changed).
        let long = Span {
            since_ms: span.until_ms - 48 * 3_600_000,
            ..span
        };
        let token = Continuation { span: long, after }.encode("d");
        assert!(
            ask(&[("continuation", &token)])
                .unwrap_err()
                .contains("TRACK_MAX_SPAN")
        );
    }
}

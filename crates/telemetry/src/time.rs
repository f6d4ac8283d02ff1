//! RFC 3339 times as the formats write and read them.
//!
//! Owns the one textual time form of the project: UTC with millisecond precision and a
//! `Z` suffix (`2026-11-22T09:15:02.500Z`), and the parser that reads RFC 3339 times.
//!
//! Parsing policy: any RFC 3339 date-time is accepted. The common form
//! `YYYY-MM-DDTHH:MM:SS[.fraction]Z` is read by a hand-written fast path; anything else
//! (numeric offsets such as `+02:00`, `-00:00`, lowercase `t`/`z`, a leap second) goes
//! through chrono's RFC 3339 parser. A time with an offset names an exact instant, so it
//! is normalised to UTC rather than rejected. The result is truncated to whole
//! milliseconds, the resolution of every format in this crate. Only years 0000 to 9999
//! (after normalisation to UTC) can be written back as RFC 3339, so other years are
//! rejected.

use chrono::{DateTime, Datelike, NaiveDate, SecondsFormat, Timelike, Utc};
use serde::{Serialize, Serializer};

/// Why a string is not an acceptable RFC 3339 time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// The text does not follow RFC 3339 (or names an impossible date or time).
    #[error("not an RFC 3339 date-time such as 2026-11-22T09:15:02.500Z")]
    Syntax,
    /// The instant, in UTC, lies outside the years 0000 to 9999.
    #[error("year outside 0000-9999 (in UTC)")]
    YearOutOfRange,
}

/// Parses an RFC 3339 date-time into UTC, truncated to whole milliseconds.
pub fn parse_rfc3339(text: &str) -> Result<DateTime<Utc>, TimeError> {
    let parsed = match parse_utc_fast(text.as_bytes()) {
        Some(t) => t,
        None => DateTime::parse_from_rfc3339(text)
            .map_err(|_| TimeError::Syntax)?
            .to_utc(),
    };
    let millis = truncate_to_millis(parsed);
    check_year(&millis)?;
    Ok(millis)
}

/// Returns `time` with its sub-millisecond part dropped (a leap second rolls into the next).
pub fn truncate_to_millis(time: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.timestamp_millis()).unwrap_or(time)
}

/// Checks that `time` can be written as RFC 3339 (years 0000 to 9999 in UTC).
pub fn check_year(time: &DateTime<Utc>) -> Result<(), TimeError> {
    if (0..=9999).contains(&time.year()) {
        Ok(())
    } else {
        Err(TimeError::YearOutOfRange)
    }
}

/// Fast path: `YYYY-MM-DDTHH:MM:SS[.f{1,}]Z`. Returns `None` for anything else, including
/// impossible dates; the caller then falls back to the general parser.
fn parse_utc_fast(b: &[u8]) -> Option<DateTime<Utc>> {
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || *b.last()? != b'Z'
    {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    let fraction = &b[19..b.len() - 1];
    let millis = match fraction.split_first() {
        None => 0,
        Some((b'.', frac)) if !frac.is_empty() && frac.iter().all(u8::is_ascii_digit) => frac
            .iter()
            .chain(b"00")
            .take(3)
            .fold(0, |acc, d| acc * 10 + u32::from(d - b'0')),
        Some(_) => return None,
    };
    if second > 59 {
        return None; // a leap second: the general parser knows how to handle it
    }
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    Some(
        date.and_hms_milli_opt(hour, minute, second, millis)?
            .and_utc(),
    )
}

/// Reads a run of ASCII digits as a number.
fn digits(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0'))
    })
}

/// A UTC time that serializes as RFC 3339 with milliseconds and `Z`, without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MillisTime(pub DateTime<Utc>);

impl MillisTime {
    /// Formats into a stack buffer when the year has four digits.
    fn format(&self) -> Option<[u8; 24]> {
        let t = truncate_to_millis(self.0);
        let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
        let mut out = *b"0000-00-00T00:00:00.000Z";
        put(&mut out[0..4], year);
        put(&mut out[5..7], t.month());
        put(&mut out[8..10], t.day());
        put(&mut out[11..13], t.hour());
        put(&mut out[14..16], t.minute());
        put(&mut out[17..19], t.second());
        put(&mut out[20..23], t.timestamp_subsec_millis());
        Some(out)
    }
}

/// Writes `value` as zero-padded decimal digits filling `slot`.
fn put(slot: &mut [u8], mut value: u32) {
    for d in slot.iter_mut().rev() {
        *d = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

impl MillisTime {
    /// Appends the time as a JSON string (with its quotes) to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'"');
        match self.format() {
            Some(buf) => out.extend_from_slice(&buf),
            None => out.extend_from_slice(self.to_string().as_bytes()),
        }
        out.push(b'"');
    }
}

impl std::fmt::Display for MillisTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.format() {
            // The buffer holds ASCII digits and punctuation only.
            Some(buf) => f.write_str(std::str::from_utf8(&buf).map_err(|_| std::fmt::Error)?),
            None => f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true)),
        }
    }
}

impl Serialize for MillisTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.format() {
            Some(buf) => serializer
                .serialize_str(std::str::from_utf8(&buf).map_err(serde::ser::Error::custom)?),
            None => serializer.collect_str(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn fast_path_reads_common_forms() {
        assert_eq!(
            parse_rfc3339("2026-11-22T09:15:02.500Z"),
            Ok(utc("2026-11-22T09:15:02.5Z"))
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T09:15:02Z"),
            Ok(utc("2026-11-22T09:15:02Z"))
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T09:15:02.5Z"),
            Ok(utc("2026-11-22T09:15:02.500Z"))
        );
        assert!(parse_utc_fast(b"2026-11-22T09:15:02.500Z").is_some());
    }

    #[test]
    fn sub_millisecond_digits_are_truncated() {
        assert_eq!(
            parse_rfc3339("2026-11-22T09:15:02.123999999Z"),
            Ok(utc("2026-11-22T09:15:02.123Z"))
        );
    }

    #[test]
    fn offsets_are_normalised_to_utc() {
        assert_eq!(
            parse_rfc3339("2026-11-22T11:15:02.500+02:00"),
            Ok(utc("2026-11-22T09:15:02.500Z"))
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T09:15:02.500-00:00"),
            Ok(utc("2026-11-22T09:15:02.500Z"))
        );
        assert_eq!(
            parse_rfc3339("2026-11-22t09:15:02.500z"),
            Ok(utc("2026-11-22T09:15:02.500Z"))
        );
    }

    #[test]
    fn rejects_non_rfc3339() {
        for bad in [
            "",
            "2026-11-22",
            "2026-11-22T09:15:02",
            "2026-11-22T09:15:02.Z",
            "2026-02-30T09:15:02Z",
            "2026-11-22T24:00:00Z",
            "2026-13-01T00:00:00Z",
            "1763802902500",
            "2026-11-22T09:15:02.500+0200",
            "+2026-11-22T09:15:02Z",
        ] {
            assert_eq!(parse_rfc3339(bad), Err(TimeError::Syntax), "{bad:?}");
        }
    }

    #[test]
    fn rejects_years_that_cannot_be_written_back() {
        assert_eq!(
            parse_rfc3339("0000-01-01T00:30:00+01:00"),
            Err(TimeError::YearOutOfRange)
        );
        assert_eq!(
            parse_rfc3339("9999-12-31T23:30:00-01:00"),
            Err(TimeError::YearOutOfRange)
        );
    }

    #[test]
    fn leap_second_rolls_into_next_second() {
        assert_eq!(
            parse_rfc3339("2016-12-31T23:59:60.250Z"),
            Ok(utc("2017-01-01T00:00:00.250Z"))
        );
    }

    #[test]
    fn formats_with_millis_and_z() {
        let t = utc("2026-11-22T09:15:02.5Z");
        assert_eq!(MillisTime(t).to_string(), "2026-11-22T09:15:02.500Z");
        assert_eq!(
            serde_json::to_string(&MillisTime(t)).unwrap(),
            "\"2026-11-22T09:15:02.500Z\""
        );
        let early = utc("0007-01-02T03:04:05.006789Z");
        assert_eq!(MillisTime(early).to_string(), "0007-01-02T03:04:05.006Z");
    }
}

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

use chrono::{DateTime, Datelike, NaiveDate, SecondsFormat, Utc};
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
    if let Some(time) = parse_utc_fast(text.as_bytes()) {
        // Whole milliseconds in a four-digit year: nothing to truncate or check.
        return Ok(time);
    }
    let parsed = DateTime::parse_from_rfc3339(text)
        .map_err(|_| TimeError::Syntax)?
        .to_utc();
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

/// Fast path: `YYYY-MM-DDTHH:MM:SS[.f{1,}]Z`, giving whole milliseconds in a year of
/// 0000-9999. Returns `None` for anything else, including impossible dates; the caller
/// then falls back to the general parser.
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

/// The first and last millisecond of the years 0000 to 9999 (UTC), the times RFC 3339
/// can write.
const MILLIS_RANGE: std::ops::RangeInclusive<i64> = -62_167_219_200_000..=253_402_300_799_999;

const MILLIS_PER_DAY: i64 = 86_400_000;

impl MillisTime {
    /// Formats into a stack buffer when the year has four digits.
    fn format(&self) -> Option<[u8; 24]> {
        // The same instant as `truncate_to_millis(self.0)`, computed from the count alone.
        let ms = self.0.timestamp_millis();
        if !MILLIS_RANGE.contains(&ms) {
            return None;
        }
        let (year, month, day) = civil_from_days(ms.div_euclid(MILLIS_PER_DAY));
        let ms_of_day = ms.rem_euclid(MILLIS_PER_DAY) as u32;
        let (secs, millis) = (ms_of_day / 1000, ms_of_day % 1000);
        let mut out = *b"0000-00-00T00:00:00.000Z";
        put2(&mut out[0..2], year / 100);
        put2(&mut out[2..4], year % 100);
        put2(&mut out[5..7], month);
        put2(&mut out[8..10], day);
        put2(&mut out[11..13], secs / 3600);
        put2(&mut out[14..16], secs / 60 % 60);
        put2(&mut out[17..19], secs % 60);
        out[20] = b'0' + (millis / 100) as u8;
        put2(&mut out[21..23], millis % 100);
        Some(out)
    }
}

/// The proleptic Gregorian (year, month, day) of a day counted from 1970-01-01, for the
/// years 0000 to 9999 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (u32, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year as u32, month as u32, day as u32)
}

/// `00` to `99`, two ASCII digits each.
const DIGIT_PAIRS: [u8; 200] = {
    let mut pairs = [0; 200];
    let mut n = 0;
    while n < 100 {
        pairs[2 * n] = b'0' + (n / 10) as u8;
        pairs[2 * n + 1] = b'0' + (n % 10) as u8;
        n += 1;
    }
    pairs
};

/// Writes `value` (below 100) as two decimal digits into `slot`.
fn put2(slot: &mut [u8], value: u32) {
    let i = value as usize * 2;
    slot.copy_from_slice(&DIGIT_PAIRS[i..i + 2]);
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
    use proptest::prelude::*;

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

    proptest! {
        #[test]
        fn formats_as_chrono_does(ms in MILLIS_RANGE, sub_ms_nanos in 0u32..1_000_000) {
            let t = DateTime::from_timestamp_millis(ms).unwrap()
                + chrono::Duration::nanoseconds(i64::from(sub_ms_nanos));
            prop_assert_eq!(
                MillisTime(t).to_string(),
                truncate_to_millis(t).to_rfc3339_opts(SecondsFormat::Millis, true)
            );
        }

        #[test]
        fn fast_path_agrees_with_chrono(ms in MILLIS_RANGE, digits in 0usize..=9) {
            let t = DateTime::from_timestamp_millis(ms).unwrap();
            let text = t.to_rfc3339_opts(SecondsFormat::Nanos, true);
            // Keep `digits` fraction digits (none: no `.` either).
            let (whole, fraction) = text.trim_end_matches('Z').split_once('.').unwrap();
            let text = match digits {
                0 => format!("{whole}Z"),
                n => format!("{whole}.{}Z", &format!("{fraction:0<9}")[..n]),
            };
            let expected = truncate_to_millis(DateTime::parse_from_rfc3339(&text).unwrap().to_utc());
            prop_assert_eq!(parse_utc_fast(text.as_bytes()), Some(expected));
            prop_assert_eq!(parse_rfc3339(&text), Ok(expected));
        }
    }
}

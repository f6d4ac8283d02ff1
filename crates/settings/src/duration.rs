//! One form for durations in every setting: a bare number is seconds (`5`, `0.5`), and a
//! number with units is read by `humantime` (`5s`, `500ms`, `2m`, `1h30m`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

/// A duration setting: `5` (seconds), `0.5`, `5s`, `500ms`, `2m`, `1h30m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DurationSetting(pub Duration);

/// A text that is not a duration; says which forms are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a duration: write seconds (5, 0.5) or a number with units (5s, 500ms, 2m, 1h30m)"
)]
pub struct DurationError(String);

impl DurationSetting {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl From<DurationSetting> for Duration {
    fn from(d: DurationSetting) -> Duration {
        d.0
    }
}

impl FromStr for DurationSetting {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let invalid = || DurationError(text.to_string());
        if text.starts_with(|c: char| c.is_ascii_digit() || c == '.')
            && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        {
            let secs: f64 = text.parse().map_err(|_| invalid())?;
            return seconds(secs).ok_or_else(invalid);
        }
        humantime::parse_duration(text)
            .map(DurationSetting)
            .map_err(|_| invalid())
    }
}

/// A whole or fractional number of seconds, if it is one a `Duration` can hold.
fn seconds(secs: f64) -> Option<DurationSetting> {
    Duration::try_from_secs_f64(secs).ok().map(DurationSetting)
}

impl fmt::Display for DurationSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for DurationSetting {
    /// A TOML string in any of the forms, or a bare number of seconds.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Whole(u64),
            Fraction(f64),
            Text(String),
        }
        match Form::deserialize(d)? {
            Form::Whole(secs) => Ok(DurationSetting(Duration::from_secs(secs))),
            Form::Fraction(secs) => seconds(secs).ok_or_else(|| {
                serde::de::Error::custom(DurationError(secs.to_string()).to_string())
            }),
            Form::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn parse(s: &str) -> Result<Duration, DurationError> {
        s.parse::<DurationSetting>().map(DurationSetting::get)
    }

    #[test]
    fn the_forms_every_program_accepts() {
        assert_eq!(parse("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse(" 5 ").unwrap(), Duration::from_secs(5));
        assert_eq!(parse("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn refuses_what_is_not_a_duration_and_says_the_forms() {
        for bad in [
            "",
            "-5",
            "five",
            "5 parsecs",
            "1e3",
            "5.5.5",
            "NaN",
            "inf",
            "s",
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains("500ms"), "{bad}: {err}");
        }
    }

    #[test]
    fn reads_toml_numbers_and_strings() {
        #[derive(Deserialize)]
        struct File {
            a: DurationSetting,
            b: DurationSetting,
            c: DurationSetting,
        }
        let f: File = toml::from_str("a = 5\nb = 0.25\nc = \"2m\"").unwrap();
        assert_eq!(f.a.get(), Duration::from_secs(5));
        assert_eq!(f.b.get(), Duration::from_millis(250));
        assert_eq!(f.c.get(), Duration::from_secs(120));
        assert!(toml::from_str::<File>("a = -5\nb = 1\nc = 1").is_err());
        assert!(toml::from_str::<File>("a = \"soon\"\nb = 1\nc = 1").is_err());
    }

    proptest! {
        /// Whole seconds read the same bare, with `s`, as milliseconds and as minutes.
        #[test]
        fn the_forms_agree(secs in 0u64..10_000_000) {
            let bare = parse(&secs.to_string()).unwrap();
            prop_assert_eq!(bare, Duration::from_secs(secs));
            prop_assert_eq!(parse(&format!("{secs}s")).unwrap(), bare);
            prop_assert_eq!(parse(&format!("{}ms", secs * 1000)).unwrap(), bare);
            prop_assert_eq!(parse(&format!("{secs}m")).unwrap(), bare * 60);
        }

        /// What is displayed reads back as the same duration.
        #[test]
        fn display_reads_back(millis in 0u64..100_000_000_000) {
            let d = DurationSetting(Duration::from_millis(millis));
            prop_assert_eq!(d.to_string().parse::<DurationSetting>().unwrap(), d);
        }

        /// No text makes the parser panic.
        #[test]
        fn never_panics(text in "\\PC{0,24}") {
            let _ = parse(&text);
        }
    }
}

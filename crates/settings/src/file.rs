//! The TOML configuration file. Its errors name the file, the line and the key, and never
//! echo a value: the value on a wrong line may be a key or a connection string. An unknown
//! key (the settings types deny them) is answered with the closest known one.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// A configuration file that cannot be read or does not fit the settings.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file cannot be read.
    #[error("config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML or a setting in it is wrong.
    #[error("config file {path}, line {line}{}: {problem}", key.as_deref().map(|k| format!(", key `{k}`")).unwrap_or_default())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The key on that line, when there is one.
        key: Option<String>,
        /// What is wrong, with any value from the file replaced by `<value>`.
        problem: String,
    },
}

/// Reads a TOML file into `T`.
pub fn read_toml<T: DeserializeOwned>(path: &Path) -> Result<T, FileError> {
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_toml(&text).map_err(|e| e.at(path))
}

/// Where and what, before the path is known.
struct Located {
    line: usize,
    key: Option<String>,
    problem: String,
}

impl Located {
    fn at(self, path: &Path) -> FileError {
        FileError::Invalid {
            path: path.to_path_buf(),
            line: self.line,
            key: self.key,
            problem: self.problem,
        }
    }
}

fn parse_toml<T: DeserializeOwned>(text: &str) -> Result<T, Located> {
    toml::from_str(text).map_err(|e: toml::de::Error| {
        let start = e.span().map_or(0, |s| s.start.min(text.len()));
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        let line_text = &text[line_start..line_end];
        let key = line_text
            .split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"').to_string())
            .filter(|k| !k.is_empty() && !k.starts_with('['));
        Located {
            line: text[..start].matches('\n').count() + 1,
            key,
            problem: scrub(&suggest_key(e.message()), line_text),
        }
    })
}

/// serde's `unknown field `x`, expected one of `a`, `b`` as `unknown key `x`: did you mean
/// `b`?` when one of the expected keys is close to it; any other message as it is.
fn suggest_key(message: &str) -> String {
    let Some((key, expected)) = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
    else {
        return message.to_string();
    };
    // The expected keys are every other piece between backquotes.
    let known = expected.split('`').skip(1).step_by(2);
    match crate::closest(key, known) {
        Some(meant) => format!("unknown key `{key}`: did you mean `{meant}`?"),
        None => message.to_string(),
    }
}

/// The message with every value that appears on the line replaced by `<value>`: serde's
/// messages quote the value they refused (`invalid type: string "...", expected ...`).
fn scrub(message: &str, line: &str) -> String {
    let Some((_, value)) = line.split_once('=') else {
        return message.to_string();
    };
    let value = value.trim();
    let mut scrubbed = message.to_string();
    for candidate in [value, value.trim_matches(|c| c == '"' || c == '\'')] {
        if candidate.len() >= 2 {
            scrubbed = scrubbed.replace(candidate, "<value>");
        }
    }
    scrubbed
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::{DurationSetting, Secret};

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Settings {
        endpoint: Option<String>,
        key: Option<Secret>,
        enabled: Option<bool>,
        interval: Option<DurationSetting>,
    }

    fn error(text: &str) -> String {
        parse_toml::<Settings>(text)
            .unwrap_err()
            .at(Path::new("writer.toml"))
            .to_string()
    }

    #[test]
    fn a_wrong_value_names_line_and_key_but_not_the_value() {
        let err = error("endpoint = \"x\"\nenabled = \"c2VjcmV0S2V5\"\n");
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("key `enabled`"), "{err}");
        assert!(!err.contains("c2VjcmV0S2V5"), "{err}");
        let err = error("interval = \"c2VjcmV0S2V5\"\n");
        assert!(
            err.contains("key `interval`") && !err.contains("c2VjcmV0S2V5"),
            "{err}"
        );
    }

    #[test]
    fn a_broken_line_is_named_without_its_text() {
        let err = error("endpoint = \"x\"\nkey = \"c2VjcmV0S2V5\n");
        assert!(err.contains("line 2"), "{err}");
        assert!(!err.contains("c2VjcmV0S2V5"), "{err}");
    }

    #[test]
    fn an_unknown_key_is_named() {
        let err = error("endpont = \"x\"\n");
        assert!(err.contains("line 1") && err.contains("endpont"), "{err}");
    }

    #[test]
    fn an_unknown_key_gets_the_closest_known_one() {
        let err = error("intervall = 5\n");
        assert!(
            err.ends_with("unknown key `intervall`: did you mean `interval`?"),
            "{err}"
        );
        // Nothing close: serde's list of the keys stays.
        let err = error("colour = \"blue\"\n");
        assert!(err.contains("expected one of"), "{err}");
    }

    #[test]
    fn a_good_file_reads() {
        let s: Settings = parse_toml("key = \"k\"\ninterval = 5\n")
            .map_err(|e| e.problem)
            .unwrap();
        assert_eq!(s.key.unwrap().expose(), "k");
        assert_eq!(s.interval.unwrap().get().as_secs(), 5);
    }
}

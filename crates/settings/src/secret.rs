//! Secrets: held in `secrecy`'s wrapper (redacted in `Debug`, wiped on drop), and read
//! from the environment, a file or standard input, never from a command-line flag, where
//! every user of the machine could read them in the process list.

use std::fmt;
use std::io::Read as _;
use std::path::PathBuf;
use std::str::FromStr;

use secrecy::{ExposeSecret as _, SecretSlice, SecretString};
use serde::Deserialize;

/// A secret string (an account key, a connection string): `Debug` prints `<redacted>`.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(SecretString);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(SecretString::from(value.into()))
    }

    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret::new(s))
    }
}

/// Secret bytes (a decoded key): `Debug` prints `<redacted>`.
#[derive(Clone)]
pub struct SecretBytes(SecretSlice<u8>);

impl SecretBytes {
    /// Wraps secret bytes.
    pub fn new(value: Vec<u8>) -> SecretBytes {
        SecretBytes(SecretSlice::from(value))
    }

    /// The bytes themselves, for the one place that needs them.
    pub fn expose(&self) -> &[u8] {
        self.0.expose_secret()
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl PartialEq for SecretBytes {
    fn eq(&self, other: &SecretBytes) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for SecretBytes {}

/// A secret that was named but cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Both `NAME` and `NAME_FILE` are set.
    #[error("both {name} and {name}_FILE are set: keep one")]
    Both {
        /// The setting.
        name: String,
    },
    /// The file (or standard input) cannot be read.
    #[error("{name}_FILE: cannot read {path}: {source}")]
    Read {
        /// The setting.
        name: String,
        /// The file; `-` for standard input.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file or variable is empty.
    #[error("{name} is empty")]
    Empty {
        /// The setting.
        name: String,
    },
}

/// The secret `name` from the environment variable `name`, or from the file named by
/// `name_FILE` (`-` reads standard input, e.g. `echo "$KEY" | program` with
/// `NAME_FILE=-`); `None` when neither is set. One trailing newline of a file is dropped.
pub fn secret_from_env(name: &str) -> Result<Option<Secret>, SecretError> {
    let file_var = format!("{name}_FILE");
    let value = std::env::var(name).ok();
    let file = std::env::var_os(&file_var).map(PathBuf::from);
    let text = match (value, file) {
        (Some(_), Some(_)) => return Err(SecretError::Both { name: name.into() }),
        (Some(value), None) => value,
        (None, Some(path)) => read_secret_file(name, path)?,
        (None, None) => return Ok(None),
    };
    if text.trim().is_empty() {
        return Err(SecretError::Empty { name: name.into() });
    }
    Ok(Some(Secret::new(text)))
}

fn read_secret_file(name: &str, path: PathBuf) -> Result<String, SecretError> {
    let read = |path: &PathBuf| {
        let mut text = String::new();
        if path.as_os_str() == "-" {
            std::io::stdin().read_to_string(&mut text)?;
        } else {
            text = std::fs::read_to_string(path)?;
        }
        Ok::<_, std::io::Error>(text)
    };
    let mut text = read(&path).map_err(|source| SecretError::Read {
        name: name.into(),
        path,
        source,
    })?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "<redacted>");
        assert_eq!(format!("{:?}", Some(secret.clone())), "Some(<redacted>)");
        assert_eq!(secret.expose(), "hunter2");
        let bytes = SecretBytes::new(vec![1, 2, 3]);
        assert_eq!(format!("{bytes:?}"), "<redacted>");
        assert_eq!(bytes.clone().expose(), &[1, 2, 3]);
    }

    /// The environment is process-wide: every case runs in this one test, each with its
    /// own variable names.
    #[test]
    fn reads_the_variable_or_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "from-file\n").unwrap();
        // SAFETY: this is the only test of the crate that touches the environment.
        unsafe {
            std::env::set_var("SETTINGS_TEST_A", "from-env");
            std::env::set_var("SETTINGS_TEST_B_FILE", &file);
            std::env::set_var("SETTINGS_TEST_C", "x");
            std::env::set_var("SETTINGS_TEST_C_FILE", &file);
            std::env::set_var("SETTINGS_TEST_D_FILE", dir.path().join("missing"));
            std::env::set_var("SETTINGS_TEST_E", "  ");
        }
        let a = secret_from_env("SETTINGS_TEST_A").unwrap().unwrap();
        assert_eq!(a.expose(), "from-env");
        let b = secret_from_env("SETTINGS_TEST_B").unwrap().unwrap();
        assert_eq!(b.expose(), "from-file");
        let c = secret_from_env("SETTINGS_TEST_C").unwrap_err().to_string();
        assert!(c.contains("SETTINGS_TEST_C_FILE"), "{c}");
        let d = secret_from_env("SETTINGS_TEST_D").unwrap_err().to_string();
        assert!(d.contains("SETTINGS_TEST_D_FILE"), "{d}");
        assert!(secret_from_env("SETTINGS_TEST_E").is_err());
        assert!(secret_from_env("SETTINGS_TEST_UNSET").unwrap().is_none());
    }
}

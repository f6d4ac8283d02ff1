//! The one way every program layers its settings: a flag, then the environment variable
//! (clap reads both), then a secret from the environment, its `NAME_FILE` or standard input
//! (never a flag), then the TOML file, then the default (which the program's own `resolve`
//! applies while it checks every value).
//!
//! A program's settings type holds every setting as an `Option`; [`layered!`](crate::layered)
//! implements [`Layered`] for it, and [`layer`] stacks the layers.
//!
//! Why not a kept crate: figment and `config` merge their sources into one tree before
//! deserializing it, so an error in the file names the key but not the line (and their
//! messages may quote the value), and neither reads a secret from `NAME_FILE` or standard
//! input; clap already reads flags and the environment with their help texts. What is left
//! to share is this: one field-by-field `or`, and the order of the layers.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::{FileError, read_toml};

/// Settings that can stand in front of other settings of the same type.
pub trait Layered: Sized + DeserializeOwned {
    /// Every setting given in `self`, the others from `fallback`.
    fn or(self, fallback: Self) -> Self;
}

/// Implements [`Layered`] for a struct of `Option` fields by naming every field (a field
/// left out does not compile):
///
/// ```
/// #[derive(Default, serde::Deserialize)]
/// struct Settings {
///     endpoint: Option<String>,
///     retries: Option<u32>,
/// }
/// settings::layered!(Settings { endpoint, retries });
///
/// use settings::Layered as _;
/// let given = Settings { retries: Some(3), ..Settings::default() };
/// let file = Settings { endpoint: Some("e".into()), retries: Some(9) };
/// let both = given.or(file);
/// assert_eq!((both.endpoint.as_deref(), both.retries), (Some("e"), Some(3)));
/// ```
///
/// Settings declared [`with_cosmos_account!`](crate::with_cosmos_account) name the
/// account's fields in one word: `layered!(Settings with_cosmos_account { retries })`.
#[macro_export]
macro_rules! layered {
    ($settings:ident with_cosmos_account { $($field:ident),* $(,)? }) => {
        $crate::layered!($settings {
            cosmos_endpoint,
            cosmos_auth,
            cosmos_key,
            cosmos_database,
            cosmos_container,
            cosmos_accept_invalid_certs,
            cosmos_allow_insecure,
            $($field),*
        });
    };
    ($settings:ident { $($field:ident),* $(,)? }) => {
        impl $crate::Layered for $settings {
            fn or(self, fallback: Self) -> Self {
                $settings { $($field: self.$field.or(fallback.$field)),* }
            }
        }
    };
}

/// The settings of a program from its layers: `given` (flags and environment, as clap read
/// them), then `secrets` (see [`crate::secret_from_env`]), then the TOML file at `file`.
pub fn layer<S: Layered>(given: S, secrets: S, file: Option<&Path>) -> Result<S, FileError> {
    let settings = given.or(secrets);
    Ok(match file {
        Some(path) => settings.or(read_toml(path)?),
        None => settings,
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::Secret;

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Settings {
        endpoint: Option<String>,
        key: Option<Secret>,
        retries: Option<u32>,
    }
    crate::layered!(Settings {
        endpoint,
        key,
        retries
    });

    #[test]
    fn flags_then_secrets_then_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        std::fs::write(
            &file,
            "endpoint = \"file\"\nkey = \"file-key\"\nretries = 9\n",
        )
        .unwrap();
        let given = Settings {
            endpoint: Some("flag".into()),
            ..Settings::default()
        };
        let secrets = Settings {
            key: Some(Secret::new("env-key")),
            ..Settings::default()
        };
        let s = layer(given, secrets, Some(&file)).unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("flag"));
        assert_eq!(s.key.unwrap().expose(), "env-key");
        assert_eq!(s.retries, Some(9));
        let s = layer(Settings::default(), Settings::default(), None).unwrap();
        assert_eq!((s.endpoint, s.retries), (None, None));
    }

    #[test]
    fn a_file_error_is_the_file_error() {
        let missing = Path::new("/nonexistent/settings.toml");
        let err = layer(Settings::default(), Settings::default(), Some(missing)).unwrap_err();
        assert!(matches!(err, FileError::Read { .. }), "{err}");
    }
}

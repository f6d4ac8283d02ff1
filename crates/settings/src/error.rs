//! The error of a program's settings that stops it at start, with what to fix: a setting
//! missing or unusable (named by its environment variable), the file, or a secret that
//! cannot be read.

/// Why the configuration cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required setting is missing.
    #[error("{name} is not set: {hint}")]
    Missing {
        /// The environment variable.
        name: &'static str,
        /// What to set it to.
        hint: &'static str,
    },
    /// A setting has an unusable value.
    #[error("{name}: {message}")]
    Invalid {
        /// The environment variable.
        name: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
    /// The config file cannot be read or parsed.
    #[error(transparent)]
    File(#[from] crate::FileError),
    /// A secret's variable or file cannot be read.
    #[error(transparent)]
    Secret(#[from] crate::SecretError),
}

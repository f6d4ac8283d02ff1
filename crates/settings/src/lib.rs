//! The settings that every program of the project reads the same way, so that an operator
//! writes them once in one form:
//!
//! - [`DurationSetting`]: `5` (seconds), `5s`, `500ms`, `2m`, `1h30m`, in a flag, an
//!   environment variable or the TOML file alike.
//! - [`Secret`] and [`secret_from_env`]: a secret comes from the environment (`NAME`), a
//!   file (`NAME_FILE`) or standard input (`NAME_FILE=-`), never from a flag, and never
//!   shows in `Debug` output or a log line.
//! - [`read_toml`]: the configuration file, whose errors name the key and the line but
//!   never echo a value (it may be a secret).
//! - [`LogFormat`]: text or JSON lines on standard error, colour only at a terminal.
//!
//! Each program keeps its own settings type and layering (flag, then environment, then
//! file, then default); this crate owns only the pieces they must agree on.

mod duration;
mod file;
mod logs;
mod secret;

pub use duration::{DurationError, DurationSetting};
pub use file::{FileError, read_toml};
pub use logs::LogFormat;
pub use secret::{Secret, SecretBytes, SecretError, secret_from_env};

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
//! - [`layer`] and [`layered!`]: the one layering of every program: flag, then
//!   environment, then secrets, then the file (the program's `resolve` applies defaults).
//! - [`ConfigError`]: a setting missing or unusable, named by its environment variable.
//! - [`closest`] and [`EnvNames`]: a misspelt setting, in the environment or the file, stops
//!   the program with the name it probably meant (`MAVLINK_ADRESS is not a setting: did
//!   you mean MAVLINK_ADDRESS?`); the names come from the program's clap command.
//! - [`with_cosmos_account!`], [`CosmosAccount`] and [`cosmos_key_from_env`]: the Cosmos
//!   DB account settings of every program that talks to the account, declared, layered
//!   and resolved once.
//! - [`LogFormat`]: text or JSON lines on standard error, colour only at a terminal.
//! - [`configured`] and [`exit_code`]: how a program ends, 2 for a configuration it cannot
//!   start with, 1 for a failure while it ran, with one line naming the program;
//!   [`stop_on_signal`]: the stop SIGTERM or Ctrl-C asks for.
//! - `reference_holds` (with the `reference` feature, for the programs' tests): a
//!   program's `SETTINGS.md` lists exactly the settings it reads.
//!
//! Each program keeps its own settings type (every setting an `Option`) and its checks;
//! this crate owns the pieces they must agree on.

mod cosmos;
mod duration;
mod error;
mod exit;
mod file;
mod layers;
mod logs;
mod names;
#[cfg(feature = "reference")]
mod reference;
mod secret;

pub use cosmos::{
    AccountAuth, CosmosAccount, CosmosAuth, CosmosGiven, cosmos_account, cosmos_key_from_env,
    insecure_transport, is_loopback,
};
pub use duration::{DurationError, DurationSetting};
pub use error::ConfigError;
pub use exit::{configured, exit_code, stop_on_signal};
pub use file::{FileError, read_toml};
pub use layers::{Layered, layer};
pub use logs::LogFormat;
pub use names::{EnvNames, UnknownVariable, UnknownVariables, closest, env_var_names};
#[cfg(feature = "reference")]
pub use reference::{Accepted, reference_holds};
pub use secret::{Secret, SecretBytes, SecretError, secret_from_env};

/// What [`with_cosmos_account!`] names from this crate's dependencies.
#[doc(hidden)]
pub mod __private {
    pub use url::Url;
}

//! The one error type of the peers.

use std::io;
use std::path::PathBuf;

/// Why a peer could not be started, stopped or restarted.
///
/// Every variant's message says what to do about it: a missing program names the
/// package that installs it, a peer that died early quotes its log.
///
/// `Debug` prints the same message as `Display`, so that `start().unwrap()` in a test
/// shows the readable message and the peer's log.
#[derive(thiserror::Error)]
pub enum PeerError {
    /// A program the peer needs is not installed.
    #[error(
        "{program} not found in {searched}; install it with `{install}` or set ${env_var} to its path"
    )]
    ProgramNotFound {
        /// The program's name, e.g. `mosquitto`.
        program: &'static str,
        /// The environment variable that overrides the program's path.
        env_var: &'static str,
        /// The places that were searched.
        searched: String,
        /// The command that installs it.
        install: &'static str,
    },

    /// The node packages in `tools/node` are not installed.
    #[error(
        "node packages missing: {missing} does not exist; install them with `npm ci --prefix tools/node` at the repository root"
    )]
    NodePackagesMissing {
        /// The package directory that was expected.
        missing: PathBuf,
    },

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The peer exited before it was ready.
    #[error("{peer} exited before it was ready ({status}); its log:\n{log}")]
    ExitedEarly {
        /// Which peer.
        peer: &'static str,
        /// How it exited.
        status: std::process::ExitStatus,
        /// Its log, or what it wrote to stderr.
        log: String,
    },

    /// The peer did not become ready, or did not exit, in time.
    #[error("{peer} did not {what} within {secs} s; its log:\n{log}")]
    Timeout {
        /// Which peer.
        peer: &'static str,
        /// What it was expected to do.
        what: &'static str,
        /// The time it was given.
        secs: u64,
        /// Its log, or what it wrote to stderr.
        log: String,
    },

    /// The peer printed something was not understood.
    #[error("{peer} printed an unexpected line {line:?}; its log:\n{log}")]
    UnexpectedOutput {
        /// Which peer.
        peer: &'static str,
        /// The line it printed.
        line: String,
        /// Its log, or what it wrote to stderr.
        log: String,
    },
}

impl std::fmt::Debug for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl PeerError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> PeerError {
        let context = context.into();
        move |source| PeerError::Io { context, source }
    }
}

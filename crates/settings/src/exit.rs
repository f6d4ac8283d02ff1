//! How every program ends: exit code 2 when its configuration cannot start it, 1 when it
//! failed while running, each with one line on standard error that names the program.

use std::fmt::Display;
use std::process::ExitCode;

/// The configuration `resolved`, or exit code 2 after `{program}: configuration error:
/// {error}` (with its causes) on standard error: what to fix before starting again.
pub fn configured<C, E: Display>(program: &str, resolved: Result<C, E>) -> Result<C, ExitCode> {
    resolved.map_err(|err| {
        eprintln!("{program}: configuration error: {err:#}");
        ExitCode::from(2)
    })
}

/// Exit code 0 for `Ok`; else 1, after the error (with its causes) in the log and as
/// `{program}: {error}` on standard error.
pub fn exit_code<E: Display>(program: &str, outcome: Result<(), E>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("{program}: {err:#}");
            ExitCode::FAILURE
        }
    }
}

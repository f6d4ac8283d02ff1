//! How every program ends: exit code 2 when its configuration cannot start it, 1 when it
//! failed while running, each with one line on standard error that names the program; and
//! a stop asked for by SIGTERM or Ctrl-C ([`stop_on_signal`]).

use std::fmt::Display;
use std::process::ExitCode;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

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

/// A token cancelled at the first SIGTERM or Ctrl-C, after `signal received: {stopping}` in
/// the log (`stopping` says what the program does before it ends). Called within a Tokio
/// runtime; the error is the SIGTERM handler that cannot be installed.
pub fn stop_on_signal(stopping: &'static str) -> std::io::Result<CancellationToken> {
    let mut terminate = signal(SignalKind::terminate())?;
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("signal received: {stopping}");
            stop.cancel();
        }
    });
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sigterm_cancels_the_token() {
        let stop = stop_on_signal("stopping").unwrap();
        assert!(!stop.is_cancelled());
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        tokio::time::timeout(std::time::Duration::from_secs(30), stop.cancelled())
            .await
            .expect("SIGTERM cancels the token");
    }
}

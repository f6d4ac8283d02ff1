//! The `fleet-api` binary run by a test: over the local Cosmos endpoint, on a free port,
//! killed when dropped.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

use cosmos_sim::CosmosSim;

/// The `fleet-api` binary, killed when dropped.
pub struct Running {
    pub child: Child,
    pub base: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary over `sim` on a free port with `settings` (warnings logged unless they
/// say otherwise), and reads the address it prints.
pub fn start_binary(sim: &CosmosSim, settings: &[(&str, &str)]) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleet-api"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("COSMOS_ENDPOINT", sim.endpoint())
        .env("COSMOS_KEY", sim.key())
        .env("API_ADDR", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .envs(settings.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the fleet-api binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("fleet-api: listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .trim_end_matches('/')
        .to_string();
    Running { child, base }
}

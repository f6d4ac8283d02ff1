//! The `edge-agent` binary with a MAVLink source, publishing to the test's Mosquitto,
//! its status file read as JSON.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use test_harness::{Mosquitto, eventually};

use crate::common::TIMEOUT;

/// The device id of every agent here.
pub const DEVICE_ID: &str = "drone-mav";

/// A running agent. Dropping it kills it.
pub struct AgentProcess {
    child: Child,
    dir: tempfile::TempDir,
}

impl AgentProcess {
    /// Starts the agent on `address` (`MAVLINK_ADDRESS`) with `env` added.
    pub fn start(broker: &Mosquitto, address: &str, env: &[(&str, &str)]) -> AgentProcess {
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("agent.log")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_edge-agent"));
        command.arg("run");
        // Only what the test sets counts.
        for (var, _) in std::env::vars_os() {
            let name = var.to_string_lossy();
            if name.starts_with("MAVLINK_")
                || name.starts_with("IOTHUB_")
                || name.starts_with("SIM_")
                // EDGE_AGENT_CONFIG, and this test's own EDGE_AGENT_VENV_MAVLINK, which
                // the agent would refuse as a misspelt setting of its own.
                || name.starts_with("EDGE_AGENT_")
            {
                command.env_remove(&var);
            }
        }
        command
            .env("POSITION_SOURCE", "mavlink")
            .env("MAVLINK_ADDRESS", address)
            .env("MQTT_URL", broker.url())
            .env("DEVICE_ID", DEVICE_ID)
            .env("BUFFER_DIR", dir.path().join("buffer"))
            .env("BUFFER_FSYNC", "false")
            .env("REPORT_INTERVAL", "200ms")
            .env("MAX_FIX_AGE", "5s")
            .env("RECONNECT_BASE", "100ms")
            .env("RECONNECT_CAP", "1s")
            .env("STATUS_FILE", dir.path().join("status.json"))
            .env("RUST_LOG", "info")
            .env_remove("LOG_JSON")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = command.spawn().expect("spawn edge-agent");
        AgentProcess { child, dir }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    fn status_path(&self) -> PathBuf {
        self.dir.path().join("status.json")
    }

    /// The status file, once written.
    pub fn status(&self) -> Option<Value> {
        let text = std::fs::read(self.status_path()).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Panics with its log if it has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("edge-agent exited ({status}):\n{}", self.log());
        }
    }

    /// Waits until `ready` holds for the status file; panics after [`TIMEOUT`] or when
    /// the agent exits.
    pub async fn wait_status(
        &mut self,
        what: &str,
        mut ready: impl FnMut(&Value) -> bool,
    ) -> Value {
        let status = eventually(
            what,
            TIMEOUT,
            async || {
                self.assert_running();
                self.status()
            },
            |status| status.as_ref().is_some_and(&mut ready),
        )
        .await;
        status.expect("a status")
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A counter of the status file's `mavlink` part (0 when absent).
pub fn mavlink_count(status: &Value, field: &str) -> u64 {
    status["mavlink"][field].as_u64().unwrap_or(0)
}

/// The locked vehicle, `(system id, component id)`.
pub fn vehicle(status: &Value) -> Option<(u64, u64)> {
    let vehicle = &status["mavlink"]["vehicle"];
    Some((
        vehicle["system_id"].as_u64()?,
        vehicle["component_id"].as_u64()?,
    ))
}

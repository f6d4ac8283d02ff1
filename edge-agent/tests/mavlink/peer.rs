//! The flight controller (tests/python/flight_controller.py and its links in
//! mavlink_link.py, pymavlink) as a child process: its JSON lines (what it sent, what it
//! received) collected as they come.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use test_harness::{eventually, eventually_blocking};

use crate::common::TIMEOUT;

/// The python of the pymavlink environment that scripts/test-all makes.
pub fn python() -> PathBuf {
    let venv = std::env::var_os("EDGE_AGENT_VENV_MAVLINK")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-mavlink")
        });
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/test-all makes the pymavlink environment \
         (python_env mavlink edge-agent/tests/python/requirements-mavlink.txt), \
         or set EDGE_AGENT_VENV_MAVLINK",
        python.display()
    );
    python
}

/// A running flight controller. Dropping it kills it.
pub struct FlightController {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<Value>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    stderr: tempfile::NamedTempFile,
    /// Its first line: `{"ev":"ready","link":...,"address":...,"device":...}`.
    pub ready: Value,
}

impl FlightController {
    /// Starts `flight_controller.py args` and waits for its `ready` line.
    pub async fn start(args: &[String]) -> FlightController {
        let stderr = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(python())
            .arg(
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/flight_controller.py"),
            )
            .args(args)
            .env("PYTHONUNBUFFERED", "1")
            // It imports tests/python/mavlink_link.py: no __pycache__ in the tree.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().unwrap())
            .spawn()
            .expect("spawn the flight controller");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let value = serde_json::from_str(&line)
                        .unwrap_or_else(|_| serde_json::json!({"ev": "text", "line": line}));
                    lines.lock().unwrap().push(value);
                }
            })
        };
        let mut peer = FlightController {
            stdin: child.stdin.take(),
            child,
            lines,
            reader: Some(reader),
            stderr,
            ready: Value::Null,
        };
        let lines = peer
            .wait_for("the flight controller's ready line", |lines| {
                lines.iter().any(|l| l["ev"] == "ready")
            })
            .await;
        peer.ready = lines.into_iter().find(|l| l["ev"] == "ready").unwrap();
        peer
    }

    /// The address it listens on (`--udpin`, `--server`, `--tcp-listen`).
    pub fn address(&self) -> String {
        self.ready["address"]
            .as_str()
            .expect("an address")
            .to_owned()
    }

    /// The pty slave the agent opens (`--serial-pty`).
    pub fn device(&self) -> String {
        self.ready["device"].as_str().expect("a device").to_owned()
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    /// A line on its standard input (`start SYSID`).
    pub fn command(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to the flight controller");
        stdin.flush().unwrap();
    }

    /// Waits until `ready` holds for its lines; panics after [`TIMEOUT`] or if it exits.
    pub async fn wait_for(
        &mut self,
        what: &str,
        mut ready: impl FnMut(&[Value]) -> bool,
    ) -> Vec<Value> {
        let lines = eventually(
            what,
            TIMEOUT,
            async || {
                if let Some(status) = self.child.try_wait().unwrap() {
                    panic!(
                        "the flight controller exited ({status}) before {what}:\n{}",
                        self.stderr()
                    );
                }
                Tail(self.lines())
            },
            |lines| ready(&lines.0),
        )
        .await;
        lines.0
    }

    /// What it wrote on standard error.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
    }

    /// Closes its standard input, which ends it, and returns all its lines.
    pub fn stop(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let status = eventually_blocking(
            "the flight controller to end when its input closed",
            TIMEOUT,
            || self.child.try_wait().unwrap(),
            Option::is_some,
        );
        let status = status.expect("ended");
        assert!(status.success(), "{status}: {}", self.stderr());
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.lines()
    }
}

impl Drop for FlightController {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lines shown by their last 8 in a failure message.
pub struct Tail(pub Vec<Value>);

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the flight controller's last lines:\n{}",
            tail(&self.0, 8)
        )
    }
}

/// The last `n` lines, one a line.
pub fn tail(lines: &[Value], n: usize) -> String {
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The lines of one kind (`sent`, `received`, `garbage`) and message (`None`: any).
pub fn events<'a>(
    lines: &'a [Value],
    ev: &'a str,
    msg: Option<&'a str>,
) -> impl Iterator<Item = &'a Value> + 'a {
    lines
        .iter()
        .filter(move |l| l["ev"] == ev && msg.is_none_or(|m| l["msg"] == m))
}

/// A HEARTBEAT the flight controller received from the agent, as it decoded it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentHeartbeat {
    /// When it arrived, on the flight controller's clock (seconds).
    pub t: f64,
    pub system_id: u64,
    pub component_id: u64,
    pub version: u64,
    pub mav_type: u64,
    pub autopilot: u64,
}

/// The HEARTBEATs the flight controller received (from the agent: nobody else speaks
/// to it).
pub fn agent_heartbeats(lines: &[Value]) -> Vec<AgentHeartbeat> {
    events(lines, "received", Some("HEARTBEAT"))
        .map(|l| AgentHeartbeat {
            t: l["t"].as_f64().unwrap(),
            system_id: l["sys"].as_u64().unwrap(),
            component_id: l["comp"].as_u64().unwrap(),
            version: l["v"].as_u64().unwrap(),
            mav_type: l["fields"]["type"].as_u64().unwrap(),
            autopilot: l["fields"]["autopilot"].as_u64().unwrap(),
        })
        .collect()
}

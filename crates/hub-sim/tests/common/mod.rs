//! Shared by the SDK tests: a hub in a temporary state directory, and the Python SDK
//! scripts run from the virtual environments that scripts/test-all installs.
#![allow(dead_code)] // each test binary uses part of this

pub mod device;
pub mod readers;
pub mod registration;

use hub_sim::{HubConfig, HubSim};
use std::path::PathBuf;
use std::process::Command;

/// A started hub and its state directory (removed when dropped).
pub struct TestHub {
    pub hub: HubSim,
    pub dir: tempfile::TempDir,
}

impl TestHub {
    pub async fn start(devices: usize) -> TestHub {
        Self::start_with(devices, |_| {}).await
    }

    pub async fn start_with(devices: usize, adjust: impl FnOnce(&mut HubConfig)) -> TestHub {
        let dir = tempfile::tempdir().unwrap();
        let mut config = HubConfig::new(dir.path());
        adjust(&mut config);
        config.devices = devices;
        config.device_prefix = "drone-".into();
        let hub = HubSim::start(config).await.unwrap();
        TestHub { hub, dir }
    }

    pub fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap()
    }

    pub fn ca_path(&self) -> String {
        self.dir.path().join("ca.pem").display().to_string()
    }

    /// Lines of devices.txt.
    pub fn device_strings(&self) -> Vec<String> {
        self.file("devices.txt")
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The python of virtual environment `name` (`device` or `eventhub`).
pub fn python(name: &str) -> PathBuf {
    let var = format!("HUB_SIM_VENV_{}", name.to_uppercase());
    let venv = std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../target/venv-{name}"))
        });
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/test-all installs the SDK environments (or set {var})",
        python.display()
    );
    python
}

/// A Python SDK script that runs beside the test and prints one JSON object per line.
pub struct LiveScript {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl LiveScript {
    /// Starts `script` (in tests/python) of virtual environment `venv`.
    pub fn start(venv: &str, script: &str, args: &[String], env: &[(&str, String)]) -> LiveScript {
        let mut command = tokio::process::Command::new(python(venv));
        command
            .arg(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/python")
                    .join(script),
            )
            .args(args)
            .env("PYTHONUNBUFFERED", "1")
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("python runs");
        let stdout = child.stdout.take().expect("piped");
        use tokio::io::AsyncBufReadExt as _;
        LiveScript {
            child,
            lines: tokio::io::BufReader::new(stdout).lines(),
        }
    }

    /// The next JSON line, waiting up to 60 s.
    pub async fn next(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the script printed a line within 60 s")
            .expect("its output reads")
            .expect("the script printed a line before it exited");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"))
    }

    /// Waits up to 60 s for the script to exit; whether it exited 0.
    pub async fn success(mut self) -> bool {
        tokio::time::timeout(std::time::Duration::from_secs(60), self.child.wait())
            .await
            .expect("the script exited within 60 s")
            .expect("it was waited for")
            .success()
    }
}

/// Runs `script` (in tests/python) with `args` and `env` in the blocking pool; returns the
/// JSON of its last output line and whether it exited 0.
pub async fn run_script(
    venv: &str,
    script: &str,
    args: &[String],
    env: &[(&str, String)],
) -> (serde_json::Value, bool) {
    let mut command = Command::new(python(venv));
    command
        .arg(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/python")
                .join(script),
        )
        .args(args)
        .env("PYTHONUNBUFFERED", "1");
    for (k, v) in env {
        command.env(k, v);
    }
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stdout.lines().last().unwrap_or_default();
    let value = serde_json::from_str(last).unwrap_or_else(|_| {
        panic!("{script} printed no JSON outcome\nstdout:\n{stdout}\nstderr:\n{stderr}")
    });
    if !output.status.success() {
        eprintln!("{script} stderr:\n{stderr}");
    }
    (value, output.status.success())
}

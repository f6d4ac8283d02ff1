//! The binary: `check` prints a clear report, a wrong setting stops it at start with a
//! message naming the setting, and `run` publishes and writes its status file until
//! SIGTERM.

mod common;

use std::process::{Command, Stdio};

use common::{Subscriber, TIMEOUT};
use test_harness::Mosquitto;

fn agent() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_edge-agent"));
    // Only what each test sets counts.
    for var in [
        "IOTHUB_DEVICE_CONNECTION_STRING",
        "MQTT_URL",
        "DEVICE_ID",
        "BUFFER_DIR",
        "POSITION_SOURCE",
        "REPORT_INTERVAL",
        "EDGE_AGENT_CONFIG",
    ] {
        command.env_remove(var);
    }
    command
}

#[test]
fn check_reports_each_part() {
    let broker = Mosquitto::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let output = agent()
        .args(["check", "--timeout", "5"])
        .env("MQTT_URL", broker.url())
        .env("DEVICE_ID", "drone-check")
        .env("BUFFER_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for part in ["configuration", "buffer", "source", "connection"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("[ ok ]") && l.contains(part)),
            "{part} missing from:\n{stdout}"
        );
    }
    assert!(stdout.contains("drone-check"), "{stdout}");

    // With the broker gone the connection line fails, and so does the command.
    drop(broker);
    let output = agent()
        .args(["check", "--timeout", "2"])
        .env("MQTT_URL", "mqtt://127.0.0.1:9")
        .env("DEVICE_ID", "drone-check")
        .env("BUFFER_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("[FAIL]") && l.contains("connection")),
        "{stdout}"
    );
}

#[test]
fn a_wrong_setting_stops_the_agent_and_says_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let output = agent()
        .env("MQTT_URL", "mqtt://127.0.0.1:1883")
        .env("DEVICE_ID", "drone-1")
        .env("BUFFER_DIR", dir.path())
        .env("REPORT_INTERVAL", "-5")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("REPORT_INTERVAL"), "{stderr}");

    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "position_source = \"sim\"\nrepot_interval = 5\n").unwrap();
    let output = agent()
        .args(["--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("repot_interval"), "{stderr}");
}

#[test]
fn the_connection_string_never_reaches_the_logs() {
    let dir = tempfile::tempdir().unwrap();
    let output = agent()
        .env(
            "IOTHUB_DEVICE_CONNECTION_STRING",
            "HostName=h.azure-devices.net;DeviceId=d;SharedAccessKey=c2VjcmV0LWtleQ==",
        )
        .env("BUFFER_DIR", dir.path())
        .env("SAS_TOKEN_TTL", "5")
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("SAS_TOKEN_TTL"), "{stderr}");
    assert!(!stderr.contains("c2VjcmV0"), "{stderr}");
}

#[tokio::test]
async fn run_publishes_writes_its_status_and_stops_on_sigterm() {
    let broker = Mosquitto::start().unwrap();
    let mut subscriber = Subscriber::connect(&broker, "sub-cli").await;
    let dir = tempfile::tempdir().unwrap();
    let status_file = dir.path().join("status.json");
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "position_source = \"sim\"\nreport_interval = 0.1\nbuffer_dir = \"{}\"\nstatus_file = \"{}\"\n",
            dir.path().join("buffer").display(),
            status_file.display()
        ),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args(["run", "--config", config.to_str().unwrap()])
        .env("MQTT_URL", broker.url())
        .env("DEVICE_ID", "drone-cli")
        .env_remove("IOTHUB_DEVICE_CONNECTION_STRING")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let received = subscriber.until(|all| all.len() >= 3).await;
    assert!(received.iter().all(|r| r.position.device_id == "drone-cli"));

    // SIGTERM: a clean stop that leaves a final status.
    let pid = child.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let exit = tokio::time::timeout(TIMEOUT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&status_file).unwrap()).unwrap();
    assert_eq!(status["device_id"], "drone-cli");
    assert_eq!(status["connection"], "stopped");
    // Nothing is lost at the stop: what was not acknowledged stays in the buffer.
    let count = |field: &str| status[field].as_u64().unwrap();
    assert!(count("generated") >= 3, "{status}");
    assert_eq!(
        count("acked") + count("buffer_depth"),
        count("generated"),
        "{status}"
    );
    for field in [
        "buffer_depth",
        "sent",
        "dropped",
        "last_fix_age_ms",
        "no_fix",
    ] {
        assert!(status.get(field).is_some(), "{field} missing from {status}");
    }
}

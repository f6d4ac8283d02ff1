//! The binary: `check` prints a clear report, a wrong setting stops it at start with a
//! message naming the setting (no source named, a variable with the agent's prefix that is
//! no setting, gpsd's address as a URL, a MAVLink signing key file that holds no key), and
//! `run` publishes and writes its status file until SIGTERM. `derive-key` is held to
//! Python's HMAC and Microsoft's published example.

mod common;

use std::process::{Command, Output, Stdio};

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
        "SOURCE",
        "GPSD_ADDRESS",
        "MAVLINK_ADDRESS",
        "MAVLINK_SYSTEM_ID",
        "MAVLINK_SIGNING_KEY_FILE",
        "REPORT_INTERVAL",
        "EDGE_AGENT_CONFIG",
    ] {
        command.env_remove(var);
    }
    command
}

/// What `command` printed and how it ended, or a panic if it still runs after [`TIMEOUT`]
/// (a `run` that should have stopped at start).
async fn finished(command: Command) -> Output {
    let child = tokio::process::Command::from(command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::timeout(TIMEOUT, child.wait_with_output())
        .await
        .expect("the agent stops at start")
        .unwrap()
}

/// The agent with a plain MQTT broker nobody listens on and a buffer in `dir`.
fn configured_but_source(dir: &std::path::Path) -> Command {
    let mut command = agent();
    command
        .env("MQTT_URL", "mqtt://127.0.0.1:9")
        .env("DEVICE_ID", "drone-1")
        .env("BUFFER_DIR", dir);
    command
}

#[test]
fn check_reports_each_part() {
    let broker = Mosquitto::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let output = agent()
        .args(["check", "--timeout", "5"])
        .env("POSITION_SOURCE", "sim")
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
        .env("POSITION_SOURCE", "sim")
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
        .env("POSITION_SOURCE", "sim")
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
        .env("POSITION_SOURCE", "sim")
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

/// The simulator runs only when named: without `POSITION_SOURCE` neither `run` nor
/// `check` starts, and the message names the variable and its values.
#[tokio::test]
async fn no_source_stops_run_and_check_naming_position_source() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["run"][..], &["check", "--timeout", "2"]] {
        let mut command = configured_but_source(dir.path());
        command.args(args);
        let output = finished(command).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        for part in [
            "POSITION_SOURCE",
            "`mavlink`",
            "`gpsd`",
            "`sim` for a simulated drone",
        ] {
            assert!(
                stderr.contains(part),
                "{args:?}: {part} missing from {stderr}"
            );
        }
    }
}

/// A newcomer's `SOURCE=gpsd` is not silently ignored.
#[tokio::test]
async fn source_without_its_prefix_is_pointed_to_position_source() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = configured_but_source(dir.path());
    command.env("SOURCE", "gpsd");
    let output = finished(command).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.trim_end().ends_with("did you mean POSITION_SOURCE?"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_misspelt_variable_stops_the_agent_with_the_setting_meant() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = configured_but_source(dir.path());
    command
        .env("POSITION_SOURCE", "mavlink")
        .env("MAVLINK_ADRESS", "udpin:127.0.0.1:14550");
    let output = finished(command).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("MAVLINK_ADRESS is not a setting: did you mean MAVLINK_ADDRESS?"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_gpsd_url_is_refused_with_the_form_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = configured_but_source(dir.path());
    command
        .args(["check", "--timeout", "2"])
        .env("POSITION_SOURCE", "gpsd")
        .env("GPSD_ADDRESS", "gpsd://localhost:2947");
    let output = finished(command).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("GPSD_ADDRESS"), "{stderr}");
    assert!(stderr.contains("write `localhost:2947`"), "{stderr}");
}

/// A signing key file that is not 64 hexadecimal digits (or cannot be read) stops the
/// agent at start, saying what to write, and never repeating what the file holds.
#[tokio::test]
async fn a_wrong_mavlink_signing_key_file_says_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.key");
    let not_hex = dir.path().join("passphrase.key");
    let secret = "my-secret-passphrase-that-is-not-a-key-but-has-64-characters-yes";
    assert_eq!(secret.len(), 64);
    std::fs::write(&short, format!("{}\n", "ab".repeat(31))).unwrap();
    std::fs::write(&not_hex, secret).unwrap();
    for (file, problem) in [
        (short, "62 characters, not 64"),
        (not_hex, "not hexadecimal"),
        (dir.path().join("missing.key"), "cannot read"),
    ] {
        let mut command = configured_but_source(dir.path());
        command
            .args(["check", "--timeout", "2"])
            .env("POSITION_SOURCE", "mavlink")
            .env("MAVLINK_ADDRESS", "udpin:127.0.0.1:9")
            .env("MAVLINK_SIGNING_KEY_FILE", &file);
        let output = finished(command).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("MAVLINK_SIGNING_KEY_FILE") && stderr.contains(problem),
            "{problem}: {stderr}"
        );
        if problem != "cannot read" {
            assert!(stderr.contains("64 hexadecimal digits"), "{stderr}");
        }
        assert!(!stderr.contains(secret), "{stderr}");
    }
}

#[tokio::test]
async fn a_gpsd_host_alone_means_port_2947() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = configured_but_source(dir.path());
    command
        .args(["check", "--timeout", "1"])
        .env("POSITION_SOURCE", "gpsd")
        .env("GPSD_ADDRESS", "127.0.0.1");
    let output = finished(command).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Accepted: the report is printed (no gpsd and no broker here, so it fails later).
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("[ ok ] configuration:")
                && l.contains("source gpsd 127.0.0.1:2947,")),
        "{stdout}"
    );
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

#[test]
fn derive_key_equals_pythons_hmac_of_the_group_key() {
    let group_key = "ZmxlZXQtZ3JvdXAta2V5LWZvci10ZXN0cw==";
    let mut child = Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args(["derive-key", "--registration-id", "drone-0042"])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    writeln!(child.stdin.take().unwrap(), "{group_key}").unwrap();
    let ours = child.wait_with_output().unwrap();
    assert!(ours.status.success());
    // The same derivation in Python's standard library, as Microsoft's samples write it.
    let python = Command::new("python3")
        .args([
            "-c",
            "import base64,hashlib,hmac,sys; k=base64.b64decode(sys.argv[1]); \
             print(base64.b64encode(hmac.new(k, sys.argv[2].encode(), hashlib.sha256).digest()).decode())",
            group_key,
            "drone-0042",
        ])
        .output()
        .unwrap();
    assert!(python.status.success());
    assert_eq!(
        String::from_utf8(ours.stdout).unwrap(),
        String::from_utf8(python.stdout).unwrap()
    );
}

#[test]
fn derive_key_from_a_file_gives_microsofts_published_example() {
    // learn.microsoft.com, "Tutorial: Provision devices using symmetric key enrollment
    // groups": this group key and registration id give this derived key.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("group.key");
    std::fs::write(
        &file,
        "8isrFI1sGsIlvvFSSFRiMfCNzv21fjbE/+ah/lSh3lF8e2YG1Te7w1KpZhJFFXJrqYKi9yegxkqIChbqOS9Egw==\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .args([
            "derive-key",
            "--registration-id",
            "sn-007-888-abc-mac-a1-b2-c3-d4-e5-f6",
        ])
        .env_clear()
        .env("DPS_GROUP_KEY_FILE", &file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "Jsm0lyGpjaVYVP2g3FnmnmG9dI/9qU24wNoykUmermc=\n"
    );
}

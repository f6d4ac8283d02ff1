//! `hub-sim device add` registers a device that the running hub then accepts.

mod common;

use common::{TestHub, run_script};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_added_from_the_command_line_connects_to_the_running_hub() {
    let hub = TestHub::start(0).await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hub-sim"))
        .args(["device", "add", "--state-dir"])
        .arg(hub.dir.path())
        .arg("cli-1")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let connection_string = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert!(
        connection_string.starts_with("HostName=localhost;DeviceId=cli-1;SharedAccessKey="),
        "{connection_string}"
    );
    let env = vec![
        ("HUB_SIM_PORT", hub.hub.mqtt_addr().port().to_string()),
        ("HUB_SIM_CA", hub.ca_path()),
        ("HUB_SIM_CONNECTION_STRING", connection_string),
    ];
    let (outcome, ok) = run_script("device", "device.py", &["send".into(), "1".into()], &env).await;
    assert!(ok, "{outcome}");
    assert_eq!(hub.hub.stats().messages_accepted, 1);

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_hub-sim"))
        .args(["device", "add", "--state-dir"])
        .arg(hub.dir.path())
        .arg("bad/id")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("device id `bad/id` is invalid"));
}

//! Microsoft's device SDK (azure-iot-device, Python) against the hub's device side.

mod common;

use common::{TestHub, run_script};
use hub_sim::Event;
use std::sync::Arc;

fn all_events(hub: &TestHub) -> Vec<Arc<Event>> {
    let parts = hub.hub.partitions();
    let mut out = Vec::new();
    for p in 0..parts.count() {
        parts.get(p).unwrap().read(0, usize::MAX, &mut out);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_device_sdk_sends_over_tls_with_a_connection_string_from_devices_txt() {
    let hub = TestHub::start(2).await;
    let strings = hub.device_strings();
    assert_eq!(strings.len(), 2);
    assert!(strings[0].starts_with("HostName=localhost;DeviceId=drone-0;SharedAccessKey="));
    let port = hub.hub.mqtt_addr().port().to_string();
    let mut runs = Vec::new();
    for cs in &strings {
        let env = vec![
            ("HUB_SIM_PORT", port.clone()),
            ("HUB_SIM_CA", hub.ca_path()),
            ("HUB_SIM_CONNECTION_STRING", cs.clone()),
        ];
        runs.push(async move {
            run_script("device", "device.py", &["send".into(), "20".into()], &env).await
        });
    }
    for (outcome, ok) in futures::future::join_all(runs).await {
        assert!(ok, "{outcome}");
        assert_eq!(outcome["sent"], 20);
    }
    let events = all_events(&hub);
    assert_eq!(events.len(), 40);
    for device in ["drone-0", "drone-1"] {
        let mine: Vec<_> = events
            .iter()
            .filter(|e| &*e.message.device_id == device)
            .collect();
        let seqs: Vec<String> = mine
            .iter()
            .map(|e| {
                e.message
                    .properties
                    .iter()
                    .find(|(k, _)| k == "seq")
                    .unwrap()
                    .1
                    .clone()
            })
            .collect();
        assert_eq!(
            seqs,
            (0..20).map(|i| i.to_string()).collect::<Vec<_>>(),
            "{device}"
        );
        let partition = hub.hub.partitions().partition_of(device);
        let first = &mine[0];
        assert_eq!(
            first.message.content_type.as_deref(),
            Some("application/json")
        );
        assert_eq!(first.message.content_encoding.as_deref(), Some("utf-8"));
        assert!(
            first
                .message
                .properties
                .contains(&("kind".into(), "position".into()))
        );
        assert_eq!(first.message.body, r#"{"seq": 0}"#.as_bytes());
        let mut in_partition = Vec::new();
        hub.hub
            .partitions()
            .get(partition)
            .unwrap()
            .read(0, usize::MAX, &mut in_partition);
        assert_eq!(
            in_partition
                .iter()
                .filter(|e| &*e.message.device_id == device)
                .count(),
            20
        );
    }
    let stats = hub.hub.stats();
    assert_eq!(stats.messages_accepted, 40);
    assert_eq!(stats.connections_accepted, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_is_refused() {
    let hub = TestHub::start(1).await;
    let good = hub.device_strings().remove(0);
    let key_at = good.find("SharedAccessKey=").unwrap() + "SharedAccessKey=".len();
    let wrong = format!("{}{}", &good[..key_at], hub_sim::new_key());
    let env = vec![
        ("HUB_SIM_PORT", hub.hub.mqtt_addr().port().to_string()),
        ("HUB_SIM_CA", hub.ca_path()),
        ("HUB_SIM_CONNECTION_STRING", wrong),
    ];
    let (outcome, ok) = run_script("device", "device.py", &["refused".into()], &env).await;
    assert!(ok, "the SDK connected with a wrong key: {outcome}");
    assert_eq!(outcome["refused"], "CredentialError");
    let stats = hub.hub.stats();
    assert_eq!(stats.connections_refused.get("bad_signature"), Some(&1));
    assert_eq!(stats.connections_accepted, 0);
    assert!(all_events(&hub).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_device_sdk_sends_over_websockets() {
    let hub = TestHub::start(1).await;
    let env = vec![
        ("HUB_SIM_PORT", hub.hub.ws_addr().port().to_string()),
        ("HUB_SIM_CA", hub.ca_path()),
        ("HUB_SIM_WEBSOCKETS", "1".to_string()),
        ("HUB_SIM_CONNECTION_STRING", hub.device_strings().remove(0)),
    ];
    let (outcome, ok) = run_script("device", "device.py", &["send".into(), "5".into()], &env).await;
    assert!(ok, "{outcome}");
    let events = all_events(&hub);
    assert_eq!(events.len(), 5);
    assert!(events.iter().all(|e| &*e.message.device_id == "drone-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_x509_device_is_known_by_its_certificate_thumbprint() {
    let hub = TestHub::start(0).await;
    let issued = hub.hub.ca().issue(&["cam-1".into()], "cam-1").unwrap();
    let stranger = hub.hub.ca().issue(&["cam-1".into()], "cam-1").unwrap();
    hub.hub
        .add_x509_device("cam-1", &hub_sim::thumbprint(&issued.cert))
        .unwrap();
    let write = |name: &str, text: &str| {
        let path = hub.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let env = |name: &str, cert: &str, key: &str| {
        vec![
            ("HUB_SIM_PORT", hub.hub.mqtt_addr().port().to_string()),
            ("HUB_SIM_CA", hub.ca_path()),
            ("HUB_SIM_HOST", "localhost".to_string()),
            ("HUB_SIM_DEVICE_ID", "cam-1".to_string()),
            ("HUB_SIM_CERT", write(&format!("{name}.pem"), cert)),
            ("HUB_SIM_KEY", write(&format!("{name}-key.pem"), key)),
        ]
    };
    let registered = env("registered", &issued.cert_pem, &issued.key_pem);
    let (outcome, ok) = run_script(
        "device",
        "device.py",
        &["send".into(), "3".into()],
        &registered,
    )
    .await;
    assert!(ok, "{outcome}");
    let events = all_events(&hub);
    assert_eq!(events.len(), 3);
    assert_eq!(events[0].message.auth, hub_sim::AuthMethod::X509);

    let unknown = env("stranger", &stranger.cert_pem, &stranger.key_pem);
    let (outcome, ok) = run_script("device", "device.py", &["refused".into()], &unknown).await;
    assert!(
        ok,
        "a certificate that is not registered connected: {outcome}"
    );
    assert_eq!(
        hub.hub
            .stats()
            .connections_refused
            .get("unknown_certificate"),
        Some(&1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_disconnects_a_device_when_its_token_expires() {
    let hub = TestHub::start(1).await;
    let env = vec![
        ("HUB_SIM_PORT", hub.hub.mqtt_addr().port().to_string()),
        ("HUB_SIM_CA", hub.ca_path()),
        ("HUB_SIM_CONNECTION_STRING", hub.device_strings().remove(0)),
        ("HUB_SIM_TTL", "3".to_string()),
    ];
    let (outcome, ok) = run_script("device", "paho_device.py", &["expiry".into()], &env).await;
    assert!(ok, "{outcome}");
    assert_eq!(outcome["connected"], true, "{outcome}");
    let after = outcome["disconnected_after"]
        .as_f64()
        .expect("the hub never disconnected");
    let expiry_in = outcome["expiry_in"].as_f64().unwrap();
    assert!(
        after >= expiry_in - 0.5,
        "disconnected at {after} s, before the expiry at {expiry_in} s"
    );
    assert_eq!(
        hub.hub.stats().connections_refused.get("token_expired"),
        Some(&1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaking_a_publish_rule_closes_the_connection_and_is_counted() {
    let hub = TestHub::start(1).await;
    let env = vec![
        ("HUB_SIM_PORT", hub.hub.mqtt_addr().port().to_string()),
        ("HUB_SIM_CA", hub.ca_path()),
        ("HUB_SIM_CONNECTION_STRING", hub.device_strings().remove(0)),
    ];
    for (mode, reason) in [
        ("wrong-topic", "topic"),
        ("qos2", "qos2"),
        ("too-large", "payload_too_large"),
    ] {
        let (outcome, ok) = run_script("device", "paho_device.py", &[mode.into()], &env).await;
        assert!(ok, "{outcome}");
        assert_eq!(outcome["connected"], true, "{mode}: {outcome}");
        assert_eq!(outcome["disconnected"], true, "{mode}: {outcome}");
        assert_eq!(
            hub.hub.stats().messages_refused.get(reason),
            Some(&1),
            "{mode}"
        );
    }
    assert!(all_events(&hub).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_connection_of_a_device_drops_the_first() {
    let hub = TestHub::start(1).await;
    let env = vec![
        ("HUB_SIM_PORT", hub.hub.mqtt_addr().port().to_string()),
        ("HUB_SIM_CA", hub.ca_path()),
        ("HUB_SIM_CONNECTION_STRING", hub.device_strings().remove(0)),
    ];
    let (outcome, ok) = run_script("device", "paho_device.py", &["takeover".into()], &env).await;
    assert!(ok, "{outcome}");
    assert_eq!(outcome["first_disconnected"], true, "{outcome}");
    assert_eq!(outcome["second_connected"], true, "{outcome}");
    assert_eq!(
        hub.hub
            .stats()
            .connections_refused
            .get("replaced_by_new_connection"),
        Some(&1)
    );
}

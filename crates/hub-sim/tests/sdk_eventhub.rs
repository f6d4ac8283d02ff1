//! Microsoft's Event Hubs SDK (azure-eventhub, Python) against the hub's built-in endpoint,
//! fed by Microsoft's device SDK.

mod common;

use common::{TestHub, run_script};
use hub_sim::Incoming;
use serde_json::Value;

fn eventhub_env(hub: &TestHub) -> Vec<(&'static str, String)> {
    vec![("HUB_SIM_EVENTHUB", hub.file("eventhub-connection-string"))]
}

async fn send_from_devices(hub: &TestHub, per_device: usize) {
    let port = hub.hub.mqtt_addr().port().to_string();
    let runs = hub.device_strings().into_iter().map(|cs| {
        let env = vec![
            ("HUB_SIM_PORT", port.clone()),
            ("HUB_SIM_CA", hub.ca_path()),
            ("HUB_SIM_CONNECTION_STRING", cs),
        ];
        async move {
            run_script(
                "device",
                "device.py",
                &["send".into(), per_device.to_string()],
                &env,
            )
            .await
        }
    });
    for (outcome, ok) in futures::future::join_all(runs).await {
        assert!(ok, "{outcome}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eventhub_sdk_reads_partition_ids_and_every_message_in_device_order() {
    let hub = TestHub::start(3).await;
    let cs = hub.file("eventhub-connection-string");
    assert!(cs.starts_with("Endpoint=sb://localhost:"), "{cs}");
    assert!(
        cs.ends_with(";EntityPath=hub-sim;UseDevelopmentEmulator=true"),
        "{cs}"
    );
    let (ids, ok) = run_script(
        "eventhub",
        "eventhub.py",
        &["ids".into()],
        &eventhub_env(&hub),
    )
    .await;
    assert!(ok, "{ids}");
    assert_eq!(ids["ids"], serde_json::json!(["0", "1", "2", "3"]));
    assert_eq!(ids["name"], "hub-sim");

    send_from_devices(&hub, 10).await;
    let (outcome, ok) = run_script(
        "eventhub",
        "eventhub.py",
        &["receive".into(), "30".into()],
        &eventhub_env(&hub),
    )
    .await;
    assert!(ok, "{outcome}");
    let events = outcome["events"].as_array().unwrap();
    assert_eq!(events.len(), 30, "{outcome}");
    for device in ["drone-0", "drone-1", "drone-2"] {
        let mine: Vec<&Value> = events.iter().filter(|e| e["device_id"] == device).collect();
        assert_eq!(mine.len(), 10, "{device}");
        let partition = hub.hub.partitions().partition_of(device).to_string();
        assert!(
            mine.iter().all(|e| e["partition"] == partition.as_str()),
            "{device} spread over partitions"
        );
        let seqs: Vec<&str> = mine
            .iter()
            .map(|e| e["properties"]["seq"].as_str().unwrap())
            .collect();
        let expected: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        assert_eq!(seqs, expected, "{device} out of order");
        let first = mine[0];
        assert_eq!(first["properties"]["kind"], "position");
        assert_eq!(first["content_type"], "application/json");
        assert_eq!(first["source"], "Telemetry");
        assert!(first["auth_method"].as_str().unwrap().contains("\"sas\""));
        assert!(first["enqueued_ms"].as_i64().unwrap() > 1_600_000_000_000);
        assert_eq!(first["body"], r#"{"seq": 0}"#);
    }
    let stats = hub.hub.stats();
    assert_eq!(stats.events_delivered, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_after_a_sequence_number_gets_only_later_events_and_partition_properties_hold() {
    let hub = TestHub::start(1).await;
    send_from_devices(&hub, 8).await;
    let partition = hub.hub.partitions().partition_of("drone-0").to_string();
    let (props, ok) = run_script(
        "eventhub",
        "eventhub.py",
        &["props".into(), partition.clone()],
        &eventhub_env(&hub),
    )
    .await;
    assert!(ok, "{props}");
    assert_eq!(props["beginning_sequence_number"], 0);
    assert_eq!(props["last_enqueued_sequence_number"], 7);
    assert_eq!(props["is_empty"], false);
    let empty = ((partition.parse::<usize>().unwrap() + 1) % 4).to_string();
    let (props, _) = run_script(
        "eventhub",
        "eventhub.py",
        &["props".into(), empty],
        &eventhub_env(&hub),
    )
    .await;
    assert_eq!(props["is_empty"], true, "{props}");

    let args = vec!["receive".into(), "3".into(), partition, "4".into()];
    let (outcome, ok) = run_script("eventhub", "eventhub.py", &args, &eventhub_env(&hub)).await;
    assert!(ok, "{outcome}");
    let seqs: Vec<i64> = outcome["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence_number"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, vec![5, 6, 7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_owner_level_takes_over_a_partition() {
    let hub = TestHub::start(1).await;
    send_from_devices(&hub, 5).await;
    let partition = hub.hub.partitions().partition_of("drone-0").to_string();
    let (outcome, ok) = run_script(
        "eventhub",
        "eventhub.py",
        &["steal".into(), partition],
        &eventhub_env(&hub),
    )
    .await;
    assert!(ok, "{outcome}");
    assert!(outcome["first_events"].as_u64().unwrap() >= 1, "{outcome}");
    assert_eq!(outcome["second_events"], 5, "{outcome}");
    let errors = outcome["first_errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("owner level")),
        "{outcome}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_policy_key_is_refused() {
    let hub = TestHub::start(0).await;
    let good = hub.file("eventhub-connection-string");
    let key = &hub.hub.policy_keys().service;
    let wrong = good.replace(key.as_str(), &hub_sim::new_key());
    let env = vec![("HUB_SIM_EVENTHUB", wrong)];
    let (outcome, ok) = run_script("eventhub", "eventhub.py", &["refused".into()], &env).await;
    assert!(ok, "{outcome}");
    assert_eq!(outcome["refused"], "AuthenticationError", "{outcome}");
    assert_eq!(
        hub.hub.stats().amqp_refused.get("cbs_unauthorized"),
        Some(&1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eventhub_sdk_reads_over_tls_trusting_the_hubs_ca_and_refuses_another_ca() {
    let hub = TestHub::start_with(0, |config| config.amqp_tls_port = Some(0)).await;
    let cs = hub.file("eventhub-tls-connection-string");
    let port = hub.hub.amqp_tls_addr().unwrap().port();
    assert_eq!(
        cs,
        format!(
            "Endpoint=sb://localhost:{port}/;SharedAccessKeyName=service;SharedAccessKey={};EntityPath=hub-sim",
            hub.hub.policy_keys().service
        )
    );
    for i in 0..5 {
        hub.hub
            .partitions()
            .append_to(2, Incoming::new("drone-tls", format!("m{i}")));
    }
    let env = vec![
        ("HUB_SIM_EVENTHUB", cs.clone()),
        ("HUB_SIM_CA", hub.ca_path()),
    ];
    let (outcome, ok) = run_script(
        "eventhub",
        "eventhub.py",
        &["receive".into(), "5".into()],
        &env,
    )
    .await;
    assert!(ok, "{outcome}");
    let bodies: Vec<&str> = outcome["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3", "m4"], "{outcome}");

    // A client that trusts another CA refuses the hub's certificate.
    let other = tempfile::tempdir().unwrap();
    let other_ca = hub_sim::Ca::load_or_create(other.path()).unwrap();
    assert_ne!(other_ca.cert_pem, hub.hub.ca_pem());
    let env = vec![
        ("HUB_SIM_EVENTHUB", cs),
        (
            "HUB_SIM_CA",
            other.path().join("ca.pem").display().to_string(),
        ),
    ];
    let (outcome, ok) = run_script("eventhub", "eventhub.py", &["refused".into()], &env).await;
    assert!(ok, "{outcome}");
    assert!(
        outcome["message"]
            .as_str()
            .unwrap()
            .contains("CERTIFICATE_VERIFY_FAILED"),
        "{outcome}"
    );
    assert!(hub.hub.stats().events_delivered >= 5);
}

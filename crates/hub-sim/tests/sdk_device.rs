//! Microsoft's device SDK (azure-iot-device, Python) against the hub's device side.

mod common;

use common::{TestHub, run_script};
use hub_sim::routing::Event;
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
    let wrong = format!("{}{}", &good[..key_at], hub_sim::registry::new_key());
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

//! Faults switched through the admin endpoint while SDK clients run.

mod common;

use common::readers::{Fe2o3Reader, fe2o3_read};
use common::{TestHub, run_script};
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use hub_sim::Incoming;
use std::time::Duration;
use test_harness::eventually;

async fn admin_hub(devices: usize) -> (TestHub, String) {
    let hub = TestHub::start_with(devices, |c| c.admin_port = Some(0)).await;
    let base = format!("http://{}", hub.hub.admin_addr().unwrap());
    (hub, base)
}

async fn post(url: String, body: &str) -> serde_json::Value {
    let response = reqwest::Client::new()
        .post(url)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_device_connections_disconnects_a_connected_device() {
    let (hub, base) = admin_hub(1).await;
    let env = vec![
        ("HUB_SIM_PORT", hub.hub.mqtt_addr().port().to_string()),
        ("HUB_SIM_CA", hub.ca_path()),
        ("HUB_SIM_CONNECTION_STRING", hub.device_strings().remove(0)),
        ("HUB_SIM_TTL", "120".to_string()),
    ];
    let device = tokio::spawn(async move {
        run_script("device", "paho_device.py", &["expiry".into()], &env).await
    });
    // Wait (bounded) for the device to be connected, then drop it.
    eventually(
        "the device connected",
        Duration::from_secs(60),
        async || hub.hub.connected_devices(),
        |&n| n > 0,
    )
    .await;
    post(format!("{base}/faults/drop-devices"), "").await;
    let (outcome, ok) = device.await.unwrap();
    assert!(ok, "{outcome}");
    let after = outcome["disconnected_after"]
        .as_f64()
        .expect("not disconnected");
    assert!(after < 60.0, "{outcome}");
    assert_eq!(
        hub.hub.stats().connections_refused.get("dropped_by_fault"),
        Some(&1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_amqp_side_stops_and_starts_again_on_its_port() {
    let (hub, base) = admin_hub(0).await;
    let env = vec![("HUB_SIM_EVENTHUB", hub.file("eventhub-connection-string"))];
    post(format!("{base}/faults/amqp/stop"), "").await;
    let (outcome, ok) = run_script("eventhub", "eventhub.py", &["refused".into()], &env).await;
    assert!(ok, "the endpoint answered while stopped: {outcome}");
    assert_eq!(outcome["refused"], "ConnectError", "{outcome}");
    post(format!("{base}/faults/amqp/start"), "").await;
    let (ids, ok) = run_script("eventhub", "eventhub.py", &["ids".into()], &env).await;
    assert!(ok, "{ids}");
    assert_eq!(ids["ids"].as_array().unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throttle_holds_device_messages_back_and_metrics_show_it() {
    let (hub, base) = admin_hub(1).await;
    let settings = post(format!("{base}/faults"), r#"{"throttlePerSec": 20}"#).await;
    assert_eq!(settings["throttlePerSec"], 20);
    let env = vec![
        ("HUB_SIM_PORT", hub.hub.mqtt_addr().port().to_string()),
        ("HUB_SIM_CA", hub.ca_path()),
        ("HUB_SIM_CONNECTION_STRING", hub.device_strings().remove(0)),
    ];
    let (outcome, ok) =
        run_script("device", "device.py", &["send".into(), "10".into()], &env).await;
    assert!(ok, "{outcome}");
    let stats = hub.hub.stats();
    assert_eq!(stats.messages_accepted, 10);
    assert!(stats.messages_throttled >= 8, "{stats:?}");
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("hub_sim_messages_accepted_total 10"),
        "{metrics}"
    );
    let partition = hub.hub.partitions().partition_of("drone-0");
    assert!(
        metrics.contains(&format!(
            "hub_sim_partition_last_sequence_number{{partition=\"{partition}\"}} 9"
        )),
        "{metrics}"
    );
    let added = post(format!("{base}/devices/late-1"), "").await;
    assert!(
        added["connectionString"]
            .as_str()
            .unwrap()
            .starts_with("HostName=localhost;DeviceId=late-1;SharedAccessKey="),
        "{added}"
    );
}

/// The stall: a receiver attached before it stays attached, is delivered nothing more and
/// has no answer to its detach, while a receiver attached after it reads the partition
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_receivers_stay_attached_and_deliver_nothing_while_new_ones_read() {
    let (hub, base) = admin_hub(0).await;
    let append = |from: i64, to: i64| {
        for i in from..to {
            let body = format!(r#"{{"seq":{i}}}"#);
            hub.hub
                .partitions()
                .append_to(0, Incoming::new("drone-stall", body));
        }
    };
    append(0, 10);
    let mut reader = Fe2o3Reader::connect(&hub.hub).await;
    let mut stalled = reader
        .receiver(&hub.hub, 0, SenderSettleMode::Settled, 50)
        .await;
    assert_eq!(
        fe2o3_read(&mut stalled, 10).await,
        (0..10).collect::<Vec<i64>>()
    );
    post(format!("{base}/faults/amqp/stall"), "").await;
    append(10, 15);
    let mut fresh = reader
        .receiver(&hub.hub, 0, SenderSettleMode::Unsettled, 50)
        .await;
    assert_eq!(
        fe2o3_read(&mut fresh, 15).await,
        (0..15).collect::<Vec<i64>>()
    );
    // The new receiver had all 15 delivered; the stalled one, attached all along, none of
    // the 5 that came after the stall.
    let nothing =
        tokio::time::timeout(Duration::from_millis(500), stalled.recv::<Body<Value>>()).await;
    assert!(
        nothing.is_err(),
        "the stalled receiver was delivered {nothing:?}"
    );
    assert_eq!(hub.hub.stats().events_delivered, 25);
    let detached = tokio::time::timeout(Duration::from_millis(500), stalled.close()).await;
    assert!(
        detached.is_err(),
        "the stalled receiver's detach was answered: {detached:?}"
    );
    reader.close().await;
}

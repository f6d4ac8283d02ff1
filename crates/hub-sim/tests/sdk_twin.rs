//! Device twins and direct methods held to Microsoft's SDKs: the device side with
//! azure-iot-device (tests/python/twin_device.py), the service side with azure-iot-hub's
//! IoTHubRegistryManager (tests/python/service.py) on the hub's HTTPS port, and the routed
//! connection state and twin change events read with azure-eventhub.

mod common;

use common::device::device_options;
use common::{LiveScript, TestHub, run_script};
use hub_sim::{HubConfig, HubSim, MethodError, MethodTimeouts, Route};
use rumqttc::{AsyncClient, Event, EventLoop, Packet, QoS};
use serde_json::{Value, json};
use std::time::Duration;

fn device_env(hub: &HubSim, ca: &str, connection_string: &str) -> Vec<(&'static str, String)> {
    vec![
        ("HUB_SIM_PORT", hub.mqtt_addr().port().to_string()),
        ("HUB_SIM_CA", ca.to_owned()),
        ("HUB_SIM_CONNECTION_STRING", connection_string.to_owned()),
    ]
}

/// azure-iot-hub's registry manager: `service.py MODE DEVICE ARGS...`.
async fn service(hub: &HubSim, ca: &str, args: &[&str]) -> Value {
    service_as(hub, ca, &hub.service_connection_string(), args).await
}

/// The same with another connection string.
async fn service_as(hub: &HubSim, ca: &str, connection_string: &str, args: &[&str]) -> Value {
    let env = vec![
        ("HUB_SIM_PORT", hub.ws_addr().port().to_string()),
        ("REQUESTS_CA_BUNDLE", ca.to_owned()),
        (
            "HUB_SIM_SERVICE_CONNECTION_STRING",
            connection_string.to_owned(),
        ),
    ];
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (outcome, ok) = run_script("service", "service.py", &args, &env).await;
    assert!(ok, "{outcome}");
    outcome
}

/// The device SDK patches reported properties once (over MQTT/TLS) and reads its twin back.
async fn report(hub: &TestHub, device: usize, patch: Value) -> Value {
    report_over(hub, device, patch, false).await
}

/// The same over MQTT/TLS or over WebSockets on the HTTPS port.
async fn report_over(hub: &TestHub, device: usize, patch: Value, websockets: bool) -> Value {
    let cs = hub.device_strings().remove(device);
    let mut env = device_env(&hub.hub, &hub.ca_path(), &cs);
    if websockets {
        env[0].1 = hub.hub.ws_addr().port().to_string();
        env.push(("HUB_SIM_WEBSOCKETS", "1".into()));
    }
    let args = vec!["report".into(), patch.to_string()];
    let (outcome, ok) = run_script("device", "twin_device.py", &args, &env).await;
    assert!(ok, "{outcome}");
    outcome
}

/// The device SDK with desired patch and method handlers set, once it says it is ready.
async fn serving(hub: &TestHub, desired: usize, methods: usize) -> LiveScript {
    let cs = hub.device_strings().remove(0);
    let env = device_env(&hub.hub, &hub.ca_path(), &cs);
    let args = vec!["serve".into(), desired.to_string(), methods.to_string()];
    let mut device = LiveScript::start("device", "twin_device.py", &args, &env);
    assert_eq!(device.next().await["ready"], true);
    device
}

/// The inner error of IoT Hub's `{"Message": "{...}", "ExceptionMessage": ""}` body.
fn inner_error(outcome: &Value) -> Value {
    serde_json::from_str(outcome["body"]["Message"].as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reported_patch_is_read_back_by_the_service_sdk_with_its_version() {
    let hub = TestHub::start(1).await;
    let first = report(
        &hub,
        0,
        json!({"fw": "1.2", "battery": {"pct": 80, "v": 15.1}}),
    )
    .await;
    assert_eq!(
        first["twin"]["reported"],
        json!({"fw": "1.2", "battery": {"pct": 80, "v": 15.1}, "$version": 2})
    );
    assert_eq!(first["twin"]["desired"], json!({"$version": 1}));
    let second = report_over(&hub, 0, json!({"fw": null, "battery": {"v": null}}), true).await;
    assert_eq!(
        second["twin"]["reported"],
        json!({"battery": {"pct": 80}, "$version": 3})
    );
    let read = service(&hub.hub, &hub.ca_path(), &["get", "drone-0"]).await;
    let twin = &read["twin"];
    assert_eq!(twin["device_id"], "drone-0");
    assert_eq!(twin["connection_state"], "Disconnected");
    let reported = &twin["properties"]["reported"];
    assert_eq!(reported["battery"], json!({"pct": 80}));
    assert_eq!(reported["$version"], 3);
    assert!(reported.get("fw").is_none());
    assert!(reported["$metadata"]["battery"]["pct"]["$lastUpdated"].is_string());
    assert_eq!(
        hub.hub.twin("drone-0").unwrap()["properties"]["reported"]["$version"],
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desired_patches_reach_the_device_sdk_with_their_versions() {
    let hub = TestHub::start(1).await;
    let ca = hub.ca_path();
    let mut device = serving(&hub, 2, 0).await;
    let updated = service(&hub.hub, &ca, &["desired", "drone-0", r#"{"rate": 5}"#]).await;
    let desired = &updated["twin"]["properties"]["desired"];
    assert_eq!(desired["rate"], 5);
    assert_eq!(desired["$version"], 2);
    assert_eq!(desired["$metadata"]["rate"]["$lastUpdatedVersion"], 2);
    assert_eq!(
        device.next().await["desired"],
        json!({"rate": 5, "$version": 2})
    );
    // A stale etag is refused (412) and the device hears nothing of it.
    let stale = service(
        &hub.hub,
        &ca,
        &["desired", "drone-0", r#"{"rate": 9}"#, "AAAAAAAAAAE="],
    )
    .await;
    assert_eq!(stale["http_status"], 412, "{stale}");
    // The in-process API patches as the REST API does.
    let version = hub
        .hub
        .update_desired("drone-0", &json!({"rate": null, "mode": "rtl"}))
        .unwrap();
    assert_eq!(version, 3);
    assert_eq!(
        device.next().await["desired"],
        json!({"rate": null, "mode": "rtl", "$version": 3})
    );
    assert_eq!(device.next().await["done"], true);
    assert!(device.success().await);
    let twin = hub.hub.twin("drone-0").unwrap();
    assert_eq!(twin["properties"]["desired"]["mode"], "rtl");
    assert!(twin["properties"]["desired"].get("rate").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_invoked_with_the_service_sdk_is_answered_by_the_device_sdk() {
    let hub = TestHub::start(1).await;
    let ca = hub.ca_path();
    let mut device = serving(&hub, 0, 2).await;
    let answer = service(
        &hub.hub,
        &ca,
        &[
            "invoke",
            "drone-0",
            "land",
            r#"{"at": [1.5, 2]}"#,
            "10",
            "5",
        ],
    )
    .await;
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(
        answer["payload"],
        json!({"echo": {"at": [1.5, 2]}, "method": "land"})
    );
    let request = device.next().await;
    assert_eq!(
        request,
        json!({"method": "land", "payload": {"at": [1.5, 2]}})
    );
    // The in-process API, as the REST API.
    let timeouts = MethodTimeouts {
        response: std::time::Duration::from_secs(10),
        connect: std::time::Duration::from_secs(5),
    };
    let answer = hub
        .hub
        .invoke_method("drone-0", "hold", &json!("now"), timeouts)
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.payload, json!({"echo": "now", "method": "hold"}));
    assert_eq!(device.next().await["method"], "hold");
    assert_eq!(device.next().await["done"], true);
    assert!(device.success().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_for_a_device_not_connected_is_404_an_unknown_device_404_and_a_wrong_key_401() {
    let hub = TestHub::start(1).await;
    let ca = hub.ca_path();
    let offline = service(
        &hub.hub,
        &ca,
        &["invoke", "drone-0", "land", "{}", "5", "0"],
    )
    .await;
    assert_eq!(offline["http_status"], 404, "{offline}");
    assert_eq!(offline["error_code"], "DeviceNotOnline");
    let inner = inner_error(&offline);
    assert_eq!(inner["errorCode"], 404_103);
    assert_eq!(inner["message"], "Timed out waiting for device to connect.");
    assert_eq!(inner["info"]["timeout"], "00:00:00");
    let key_at = hub
        .hub
        .service_connection_string()
        .find("SharedAccessKey=")
        .unwrap();
    let wrong = format!(
        "{}SharedAccessKey={}",
        &hub.hub.service_connection_string()[..key_at],
        hub_sim::new_key()
    );
    let refused = service_as(&hub.hub, &ca, &wrong, &["get", "drone-0"]).await;
    assert_eq!(refused["http_status"], 401, "{refused}");
    // The service policy (ServiceConnect) reads twins as the owner does.
    let service_policy = format!(
        "HostName=localhost;SharedAccessKeyName=service;SharedAccessKey={}",
        hub.hub.policy_keys().service
    );
    let read = service_as(&hub.hub, &ca, &service_policy, &["get", "drone-0"]).await;
    assert_eq!(read["twin"]["device_id"], "drone-0", "{read}");
    let unknown = service(&hub.hub, &ca, &["get", "ghost"]).await;
    assert_eq!(unknown["http_status"], 404, "{unknown}");
    assert_eq!(unknown["error_code"], "DeviceNotFound");
    assert_eq!(inner_error(&unknown)["errorCode"], 404_001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_and_desired_documents_over_32_kb_are_refused() {
    let hub = TestHub::start(1).await;
    let big = "x".repeat(32 * 1024);
    let refused = report(&hub, 0, json!({ "log": big })).await;
    // The SDK raises ClientError from the ServiceError its pipeline made of the 400 answer.
    assert_eq!(refused["error"], "ClientError", "{refused}");
    assert!(
        refused["cause"].as_str().unwrap().contains("400"),
        "{refused}"
    );
    assert_eq!(refused["twin"]["reported"], json!({"$version": 1}));
    let patch = json!({ "plan": big }).to_string();
    let desired = service(&hub.hub, &hub.ca_path(), &["desired", "drone-0", &patch]).await;
    assert_eq!(desired["http_status"], 400, "{desired}");
    assert_eq!(desired["error_code"], "ArgumentInvalid");
    let twin = hub.hub.twin("drone-0").unwrap();
    assert_eq!(twin["properties"]["desired"]["$version"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twins_are_kept_across_a_restart() {
    let hub = TestHub::start(1).await;
    let ca = hub.ca_path();
    report(&hub, 0, json!({"fw": "2.0"})).await;
    service(&hub.hub, &ca, &["desired", "drone-0", r#"{"rate": 7}"#]).await;
    let TestHub { hub: first, dir } = hub;
    first.shutdown().await;
    let again = HubSim::start(HubConfig::new(dir.path())).await.unwrap();
    let read = service(&again, &ca, &["get", "drone-0"]).await;
    let properties = &read["twin"]["properties"];
    assert_eq!(properties["reported"]["fw"], "2.0");
    assert_eq!(properties["reported"]["$version"], 2);
    assert_eq!(properties["desired"]["rate"], 7);
    assert_eq!(properties["desired"]["$version"], 2);
    assert_eq!(read["twin"]["version"], 3);
    again.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_state_and_twin_change_events_reach_the_event_hubs_sdk() {
    let hub = TestHub::start_with(1, |config| {
        config.routes = vec![Route::ConnectionState, Route::TwinChanges];
    })
    .await;
    report(&hub, 0, json!({"fw": "3.1"})).await;
    let ca = hub.ca_path();
    service(
        &hub.hub,
        &ca,
        &["desired", "drone-0", r#"{"rate": 5, "mode": "rtl"}"#],
    )
    .await;
    service(&hub.hub, &ca, &["replace", "drone-0", r#"{"rate": 6}"#]).await;
    let env = vec![("HUB_SIM_EVENTHUB", hub.hub.eventhub_connection_string())];
    let (outcome, ok) = run_script(
        "eventhub",
        "eventhub.py",
        &["receive".into(), "5".into()],
        &env,
    )
    .await;
    assert!(ok, "{outcome}");
    let events = outcome["events"].as_array().unwrap();
    assert_eq!(events.len(), 5, "{outcome}");
    let partition = hub.hub.partitions().partition_of("drone-0").to_string();
    for event in events {
        assert_eq!(event["partition"], partition.as_str());
        assert_eq!(event["device_id"], "drone-0");
        assert_eq!(event["content_type"], "application/json");
        assert_eq!(event["system"]["content-encoding"], "utf-8");
        assert_eq!(event["system"]["user-id"], "hub-sim");
        assert_eq!(event["auth_method"], "", "no auth method on hub events");
        let properties = &event["properties"];
        assert_eq!(properties["hubName"], "hub-sim");
        assert_eq!(properties["deviceId"], "drone-0");
        assert!(
            properties["operationTimestamp"]
                .as_str()
                .unwrap()
                .ends_with('Z')
        );
    }
    let op = |i: usize| {
        events[i]["properties"]["opType"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        [op(0), op(1), op(2), op(3), op(4)],
        [
            "deviceConnected",
            "updateTwin",
            "deviceDisconnected",
            "updateTwin",
            "replaceTwin"
        ]
    );
    for i in [0, 2] {
        assert_eq!(events[i]["source"], "deviceConnectionStateEvents");
        assert_eq!(
            events[i]["properties"]["iothub-message-schema"],
            "deviceConnectionStateNotification"
        );
        let body: Value = serde_json::from_str(events[i]["body"].as_str().unwrap()).unwrap();
        assert!(body["sequenceNumber"].is_string());
    }
    assert_eq!(events[1]["source"], "twinChangeEvents");
    assert_eq!(
        events[1]["properties"]["iothub-message-schema"],
        "twinChangeNotification"
    );
    let body: Value = serde_json::from_str(events[1]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["version"], 2);
    assert_eq!(body["properties"]["reported"]["fw"], "3.1");
    assert_eq!(body["properties"]["reported"]["$version"], 2);
    let body =
        |i: usize| -> Value { serde_json::from_str(events[i]["body"].as_str().unwrap()).unwrap() };
    let desired = body(3)["properties"]["desired"].clone();
    assert_eq!(
        (desired["rate"].clone(), desired["$version"].clone()),
        (json!(5), json!(2))
    );
    assert_eq!(desired["$metadata"]["rate"]["$lastUpdatedVersion"], 2);
    let replaced = body(4);
    assert_eq!(replaced["version"], 4);
    let desired = &replaced["properties"]["desired"];
    assert_eq!(desired["rate"], 6);
    assert_eq!(desired["$version"], 3);
    assert!(desired.get("mode").is_none(), "{replaced}");
    for i in [3, 4] {
        assert_eq!(events[i]["source"], "twinChangeEvents");
    }
    let twin = hub.hub.twin("drone-0").unwrap();
    assert_eq!(
        twin["properties"]["desired"]["mode"],
        Value::Null,
        "the replacement dropped what it did not name"
    );
}

/// Polls the event loop until `until` accepts an event; each poll is bounded by 30 s.
async fn poll_until(events: &mut EventLoop, mut until: impl FnMut(&Event) -> bool) -> Event {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.poll())
            .await
            .expect("an MQTT event within 30 s")
            .expect("the connection holds");
        if until(&event) {
            return event;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_does_not_answer_is_504_or_closed_and_twin_publishes_stay_out_of_the_partitions()
 {
    let hub = TestHub::start(1).await;
    let cs = hub.device_strings().remove(0);
    let options = device_options(
        &cs,
        hub.hub.mqtt_addr().port(),
        hub.hub.ca_pem().as_bytes(),
        10,
    );
    let (client, mut events) = AsyncClient::new(options, 10);
    client
        .subscribe("$iothub/methods/POST/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    poll_until(&mut events, |e| {
        matches!(e, Event::Incoming(Packet::SubAck(_)))
    })
    .await;
    let timeouts = MethodTimeouts {
        response: Duration::from_secs(1),
        connect: Duration::ZERO,
    };
    let call = {
        let hub = &hub.hub;
        async move {
            hub.invoke_method("drone-0", "land", &json!({}), timeouts)
                .await
        }
    };
    let request = async {
        let event = poll_until(&mut events, |e| {
            matches!(e, Event::Incoming(Packet::Publish(_)))
        })
        .await;
        let Event::Incoming(Packet::Publish(publish)) = event else {
            unreachable!()
        };
        (publish.topic, events)
    };
    let (outcome, (topic, mut events)) = tokio::join!(call, request);
    assert_eq!(
        outcome,
        Err(MethodError::GatewayTimeout(Duration::from_secs(1)))
    );
    assert!(
        topic.starts_with("$iothub/methods/POST/land/?$rid="),
        "{topic}"
    );
    // A late answer is dropped; a twin read is answered; neither reaches a partition.
    let rid = topic.split("$rid=").nth(1).unwrap().to_owned();
    client
        .publish(
            format!("$iothub/methods/res/200/?$rid={rid}"),
            QoS::AtLeastOnce,
            false,
            "{}",
        )
        .await
        .unwrap();
    client
        .subscribe("$iothub/twin/res/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    client
        .publish("$iothub/twin/GET/?$rid=9", QoS::AtLeastOnce, false, "")
        .await
        .unwrap();
    let answer = poll_until(&mut events, |e| {
        matches!(e, Event::Incoming(Packet::Publish(_)))
    })
    .await;
    let Event::Incoming(Packet::Publish(answer)) = answer else {
        unreachable!()
    };
    assert_eq!(answer.topic, "$iothub/twin/res/200/?$rid=9");
    let twin: Value = serde_json::from_slice(&answer.payload).unwrap();
    assert_eq!(
        twin,
        json!({"desired": {"$version": 1}, "reported": {"$version": 1}})
    );
    let parts = hub.hub.partitions();
    assert!((0..parts.count()).all(|p| parts.get(p).unwrap().info().is_empty()));
    // Over REST the same silence is 504 GatewayTimeout (504101).
    let ca = hub.ca_path();
    let outcome = service(
        &hub.hub,
        &ca,
        &["invoke", "drone-0", "land", "{}", "1", "0"],
    );
    let (outcome, _) = tokio::join!(
        outcome,
        poll_until(&mut events, |e| {
            matches!(e, Event::Incoming(Packet::Publish(_)))
        })
    );
    assert_eq!(outcome["http_status"], 504, "{outcome}");
    assert_eq!(outcome["error_code"], "GatewayTimeout");
    assert_eq!(inner_error(&outcome)["errorCode"], 504_101);
    // A device that leaves while a call waits ends the call at once.
    let timeouts = MethodTimeouts {
        response: Duration::from_secs(120),
        connect: Duration::ZERO,
    };
    let call = {
        let hub = &hub.hub;
        async move {
            hub.invoke_method("drone-0", "land", &json!({}), timeouts)
                .await
        }
    };
    let leave = async {
        poll_until(&mut events, |e| {
            matches!(e, Event::Incoming(Packet::Publish(_)))
        })
        .await;
        client.disconnect().await.unwrap();
        poll_until(&mut events, |e| {
            matches!(e, Event::Outgoing(rumqttc::Outgoing::Disconnect))
        })
        .await;
    };
    let started = std::time::Instant::now();
    let (outcome, ()) = tokio::join!(call, leave);
    assert_eq!(outcome, Err(MethodError::DeviceConnectionClosed));
    assert!(started.elapsed() < Duration::from_secs(60));
}

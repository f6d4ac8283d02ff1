//! Microsoft's provisioning client (azure-iot-device's ProvisioningDeviceClient, Python)
//! against the hub's provisioning service; its IoTHubDeviceClient against the assigned hub;
//! and azure-eventhub reading what the new device sent.

mod common;

use common::{TestHub, run_script};
use hub_sim::Ca;
use hub_sim::EnrollmentId;
use hub_sim::Event;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Every test here ends within this, SDK runs included.
async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(180), test)
        .await
        .expect("the test did not finish in time")
}

/// A hub whose provisioning service has a port of its own and answers quickly.
async fn hub() -> TestHub {
    TestHub::start_with(0, |config| {
        config.dps.port = Some(0);
        config.dps.retry_after = Duration::from_secs(1);
    })
    .await
}

fn provisioning_env(hub: &TestHub, registration_id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("HUB_SIM_DPS_PORT", hub.hub.dps_addr().port().to_string()),
        ("HUB_SIM_HUB_PORT", hub.hub.mqtt_addr().port().to_string()),
        ("HUB_SIM_CA", hub.ca_path()),
        ("HUB_SIM_ID_SCOPE", hub.hub.id_scope().to_owned()),
        ("HUB_SIM_REGISTRATION_ID", registration_id.to_owned()),
    ]
}

async fn provision(args: &[&str], env: &[(&str, String)]) -> (Value, bool) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    run_script("device", "provision.py", &args, env).await
}

fn all_events(hub: &TestHub) -> Vec<Arc<Event>> {
    let parts = hub.hub.partitions();
    let mut out = Vec::new();
    for p in 0..parts.count() {
        parts.get(p).unwrap().read(0, usize::MAX, &mut out);
    }
    out
}

fn assert_assigned(outcome: &Value, registration_id: &str) {
    assert_eq!(outcome["status"], "assigned", "{outcome}");
    assert_eq!(outcome["assigned_hub"], "localhost", "{outcome}");
    assert_eq!(outcome["device_id"], registration_id, "{outcome}");
    assert_eq!(outcome["substatus"], "initialAssignment", "{outcome}");
    assert!(
        outcome["etag"].is_string() && outcome["created"].is_string(),
        "{outcome}"
    );
    assert!(
        outcome["operation_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("4.")),
        "{outcome}"
    );
    // The service returns a payload only from a custom allocation webhook (the SDK renders
    // none as JSON `null`).
    assert_eq!(outcome["payload"], "null", "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symmetric_key_group_member_registers_sends_and_the_eventhub_sdk_reads_it() {
    bounded(async {
        let hub = hub().await;
        assert_ne!(hub.hub.dps_addr(), hub.hub.mqtt_addr());
        assert_eq!(hub.file("dps-id-scope"), hub.hub.id_scope());
        let group_key = hub.hub.add_symmetric_key_group("fleet").unwrap();
        let mut env = provisioning_env(&hub, "drone-dps-1");
        env.push(("HUB_SIM_GROUP_KEY", group_key.clone()));
        let (outcome, ok) = provision(&["send", "3"], &env).await;
        assert!(ok, "{outcome}");
        assert_assigned(&outcome, "drone-dps-1");
        assert_eq!(outcome["sent"], 3);
        assert_eq!(hub.hub.stats().registrations_assigned, 1);

        // The device key the SDK side derived is the one the service created the device with.
        let registrations = hub.hub.dps_registrations();
        assert_eq!(registrations.len(), 1);
        assert_eq!(registrations[0].payload, json!({ "model": "drone-x" }));
        assert_eq!(
            registrations[0].enrollment,
            EnrollmentId::Group("fleet".into())
        );

        let eventhub = vec![("HUB_SIM_EVENTHUB", hub.hub.eventhub_connection_string())];
        let (read, ok) = run_script(
            "eventhub",
            "eventhub.py",
            &["receive".into(), "3".into()],
            &eventhub,
        )
        .await;
        assert!(ok, "{read}");
        let events = read["events"].as_array().unwrap();
        assert_eq!(events.len(), 3, "{read}");
        for event in events {
            assert_eq!(event["device_id"], "drone-dps-1");
            assert!(
                event["auth_method"].as_str().unwrap().contains("\"sas\""),
                "{event}"
            );
        }
        let mut bodies: Vec<&str> = events.iter().map(|e| e["body"].as_str().unwrap()).collect();
        bodies.sort();
        assert_eq!(bodies, [r#"{"seq": 0}"#, r#"{"seq": 1}"#, r#"{"seq": 2}"#]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_over_websockets_reaches_the_service_on_the_hubs_websocket_port() {
    bounded(async {
        let hub = hub().await;
        let group_key = hub.hub.add_symmetric_key_group("fleet").unwrap();
        let ws_port = hub.hub.ws_addr().port().to_string();
        let mut env = provisioning_env(&hub, "drone-ws-1");
        env.retain(|(name, _)| !name.ends_with("_PORT"));
        env.extend([
            ("HUB_SIM_DPS_PORT", ws_port.clone()),
            ("HUB_SIM_HUB_PORT", ws_port),
            ("HUB_SIM_WEBSOCKETS", "1".to_owned()),
            ("HUB_SIM_GROUP_KEY", group_key),
        ]);
        let (outcome, ok) = provision(&["send", "1"], &env).await;
        assert!(ok, "{outcome}");
        assert_assigned(&outcome, "drone-ws-1");
        assert_eq!(all_events(&hub).len(), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_x509_group_member_presenting_its_chain_registers_and_sends() {
    bounded(async {
        let hub = hub().await;
        let root = Ca::generate().unwrap();
        let intermediate = root.intermediate("fleet intermediate").unwrap();
        hub.hub.add_x509_group("cameras", &root.cert_pem).unwrap();
        let leaf = intermediate.issue(&[], "cam-7").unwrap();
        let write = |name: &str, text: &str| {
            let path = hub.dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let mut env = provisioning_env(&hub, "cam-7");
        env.push((
            "HUB_SIM_CERT",
            write(
                "cam-7-chain.pem",
                &format!("{}{}", leaf.cert_pem, intermediate.cert_pem),
            ),
        ));
        env.push(("HUB_SIM_KEY", write("cam-7-key.pem", &leaf.key_pem)));
        let (outcome, ok) = provision(&["send", "2"], &env).await;
        assert!(ok, "{outcome}");
        assert_assigned(&outcome, "cam-7");
        let events = all_events(&hub);
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| &*e.message.device_id == "cam-7"));
        assert_eq!(events[0].message.auth, hub_sim::AuthMethod::X509);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_derived_key_a_disabled_group_and_an_unknown_chain_are_refused() {
    bounded(async {
        let hub = hub().await;
        let group_key = hub.hub.add_symmetric_key_group("fleet").unwrap();
        let other_group = hub_sim::new_key();
        let wrong = hub_sim::derive_device_key(&other_group, "drone-9").unwrap();
        let mut env = provisioning_env(&hub, "drone-9");
        env.push(("HUB_SIM_GROUP_KEY", group_key));
        let mut wrong_env = env.clone();
        wrong_env.push(("HUB_SIM_DEVICE_KEY", wrong));
        // The service answers the register request 401 (401002); the SDK raises ClientError
        // from its ServiceError.
        for (case, env) in [("wrong key", &wrong_env), ("disabled group", &env)] {
            if case == "disabled group" {
                hub.hub
                    .set_enrollment_enabled(&EnrollmentId::Group("fleet".into()), false)
                    .unwrap();
            }
            let (outcome, ok) = provision(&["refused"], env).await;
            assert!(ok, "{case}: the SDK registered: {outcome}");
            assert_eq!(outcome["refused"], "ClientError", "{case}: {outcome}");
            assert_eq!(outcome["cause"], "ServiceError", "{case}: {outcome}");
            assert!(
                outcome["message"]
                    .as_str()
                    .unwrap()
                    .contains("status code 401"),
                "{case}: {outcome}"
            );
        }

        // A chain that leads to no enrolled CA is refused at CONNECT, as the service does.
        let stranger = Ca::generate().unwrap().issue(&[], "cam-9").unwrap();
        hub.hub
            .add_x509_group("cameras", &Ca::generate().unwrap().cert_pem)
            .unwrap();
        let cert = hub.dir.path().join("stranger.pem");
        let key = hub.dir.path().join("stranger-key.pem");
        std::fs::write(&cert, &stranger.cert_pem).unwrap();
        std::fs::write(&key, &stranger.key_pem).unwrap();
        let mut env = provisioning_env(&hub, "cam-9");
        env.push(("HUB_SIM_CERT", cert.display().to_string()));
        env.push(("HUB_SIM_KEY", key.display().to_string()));
        let (outcome, ok) = provision(&["refused"], &env).await;
        assert!(ok, "the SDK registered with an unknown chain: {outcome}");
        assert_eq!(outcome["refused"], "CredentialError", "{outcome}");

        assert!(hub.hub.dps_registrations().is_empty());
        let stats = hub.hub.stats();
        assert_eq!(stats.connections_accepted, 0);
        assert_eq!(stats.registrations_assigned, 0);
        assert_eq!(stats.registrations_refused.get("no_enrollment"), Some(&2));
        assert_eq!(
            stats.registrations_refused.get("enrollment_disabled"),
            Some(&1)
        );
    })
    .await;
}

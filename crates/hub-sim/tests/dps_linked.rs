//! The provisioning service in front of two hubs of one process: a group enrolled through the
//! admin endpoint, a fleet registering over MQTT and spread evenly, each device created on
//! its hub with its derived key and sending to it at the assigned host name; and a group
//! enrolled from the command line while the hub runs.
//!
//! The second hub listens on 127.0.0.2 at the first one's MQTT port, with host name
//! `127.0.0.2`: a client reaches every assigned hub at `{assignedHub}:{port}`, and the server
//! certificate names the address.

mod common;

use common::TestHub;
use common::device::device_options;
use common::registration::register;
use hub_sim::Allocation;
use hub_sim::derive_device_key;
use hub_sim::{HubConfig, HubSim};
use serde_json::Value;
use std::time::Duration;

async fn bounded<T>(test: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(120), test)
        .await
        .expect("the test did not finish in time")
}

fn key_of(connection_string: &str) -> &str {
    connection_string.split("SharedAccessKey=").nth(1).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_registers_evenly_over_two_linked_hubs() {
    bounded(async {
        let a = TestHub::start_with(0, |config| {
            config.admin_port = Some(0);
            config.dps.allocation = Allocation::EvenlyDistributed;
            config.dps.retry_after = Duration::ZERO;
        })
        .await;
        // Hub B trusts the same CA: its state directory starts with A's.
        let b_dir = tempfile::tempdir().unwrap();
        for file in ["ca.pem", "ca-key.pem"] {
            std::fs::copy(a.dir.path().join(file), b_dir.path().join(file)).unwrap();
        }
        let port = a.hub.mqtt_addr().port();
        let mut b_config = HubConfig::new(b_dir.path());
        b_config.host = "127.0.0.2".into();
        b_config.bind = "127.0.0.2".parse().unwrap();
        b_config.mqtt_port = port;
        let b = HubSim::start(b_config).await.unwrap();
        assert_eq!(b.ca_pem(), a.hub.ca_pem());
        a.hub.link_hub(&b).unwrap();
        assert!(a.hub.link_hub(&b).is_err(), "a host name is linked once");
        assert_eq!(a.hub.linked_hubs(), ["localhost", "127.0.0.2"]);

        let admin = format!("http://{}", a.hub.admin_addr().unwrap());
        let client = reqwest::Client::new();
        let added: Value = client
            .post(format!("{admin}/enrollments/groups/fleet"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let group_key = added["primaryKey"].as_str().unwrap().to_owned();

        for i in 0..20 {
            let id = format!("drone-{i}");
            let key = derive_device_key(&group_key, &id).unwrap();
            let (status, body) = register(
                a.hub.dps_addr(),
                a.hub.ca_pem(),
                a.hub.id_scope(),
                &id,
                &key,
            )
            .await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["registrationState"]["deviceId"], id.as_str());
        }
        let registrations = a.hub.dps_registrations();
        let on_b: Vec<_> = registrations
            .iter()
            .filter(|r| r.assigned_hub == "127.0.0.2")
            .collect();
        assert_eq!((registrations.len(), on_b.len()), (20, 10));
        // Each device exists on its hub with the key it derived (add_device finds it).
        let on_b_id = &on_b[0].registration_id;
        let key = derive_device_key(&group_key, on_b_id).unwrap();
        let on_b_string = b.add_device(on_b_id).unwrap();
        assert_eq!(key_of(&on_b_string), key);
        let options = device_options(&on_b_string, port, a.hub.ca_pem().as_bytes(), 10);
        let (device, mut link) = rumqttc::AsyncClient::new(options, 10);
        device
            .publish(
                format!("devices/{on_b_id}/messages/events/"),
                rumqttc::QoS::AtLeastOnce,
                false,
                "hello",
            )
            .await
            .unwrap();
        loop {
            match link
                .poll()
                .await
                .expect("the device reaches its assigned hub")
            {
                rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_)) => break,
                _ => continue,
            }
        }
        assert_eq!(b.stats().messages_accepted, 1);
        assert_eq!(a.hub.stats().messages_accepted, 0);
        let on_a_id = &registrations
            .iter()
            .find(|r| r.assigned_hub == "localhost")
            .unwrap()
            .registration_id;
        let key = derive_device_key(&group_key, on_a_id).unwrap();
        assert_eq!(key_of(&a.hub.add_device(on_a_id).unwrap()), key);

        let dps: Value = reqwest::get(format!("{admin}/dps"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(dps["idScope"], a.hub.id_scope());
        assert_eq!(dps["registrations"].as_array().unwrap().len(), 20);

        // Disabled through the admin endpoint: the next registration is refused.
        let disabled = client
            .post(format!("{admin}/enrollments/groups/fleet"))
            .body(r#"{"enabled": false}"#)
            .send()
            .await
            .unwrap();
        assert!(disabled.status().is_success());
        let key = derive_device_key(&group_key, "drone-99").unwrap();
        let (status, body) = register(
            a.hub.dps_addr(),
            a.hub.ca_pem(),
            a.hub.id_scope(),
            "drone-99",
            &key,
        )
        .await;
        assert_eq!((status, body["errorCode"].as_u64()), (401, Some(401002)));
        b.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_enrolled_from_the_command_line_registers_on_the_running_hub() {
    bounded(async {
        let hub = TestHub::start(0).await;
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_hub-sim"))
            .args(["enrollment", "add", "--group", "cli-fleet", "--state-dir"])
            .arg(hub.dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let group_key = String::from_utf8(output.stdout).unwrap().trim().to_owned();
        let key = derive_device_key(&group_key, "cli-drone").unwrap();
        let (status, body) = register(
            hub.hub.dps_addr(),
            hub.hub.ca_pem(),
            &hub.file("dps-id-scope"),
            "cli-drone",
            &key,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["registrationState"]["assignedHub"], "localhost");
        // Without --dps-port, registrations are served on the device MQTT port.
        assert_eq!(hub.hub.dps_addr(), hub.hub.mqtt_addr());
    })
    .await;
}

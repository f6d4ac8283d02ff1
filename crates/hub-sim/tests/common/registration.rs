//! A registration with the hub's provisioning service as a plain MQTT client (rumqttc) speaks
//! it: symmetric key, TLS trusting the hub's CA, register then poll until an answer that is
//! not 202. For tests that need many registrations fast; Microsoft's SDK is held to the
//! service in sdk_dps.rs.

use hub_sim::{make_token, now_secs};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS, TlsConfiguration, Transport};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

/// The final answer: its status and body.
pub async fn register(
    dps: SocketAddr,
    ca_pem: &str,
    id_scope: &str,
    registration_id: &str,
    device_key: &str,
) -> (u16, Value) {
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD
        .decode(device_key)
        .expect("a base64 key");
    let token = make_token(
        &format!("{id_scope}/registrations/{registration_id}"),
        &key,
        now_secs() + 3600,
        Some("registration"),
    );
    let mut options = MqttOptions::new(registration_id, "localhost", dps.port());
    options.set_credentials(
        format!("{id_scope}/registrations/{registration_id}/api-version=2019-03-31"),
        token,
    );
    options.set_keep_alive(Duration::from_secs(30));
    options.set_transport(Transport::tls_with_config(TlsConfiguration::Simple {
        ca: ca_pem.as_bytes().to_vec(),
        alpn: None,
        client_auth: None,
    }));
    let (client, mut events) = AsyncClient::new(options, 10);
    client
        .subscribe("$dps/registrations/res/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    let body = json!({ "registrationId": registration_id }).to_string();
    client
        .publish(
            "$dps/registrations/PUT/iotdps-register/?$rid=1",
            QoS::AtLeastOnce,
            false,
            body,
        )
        .await
        .unwrap();
    let mut rid = 1;
    loop {
        let event = events
            .poll()
            .await
            .expect("the provisioning connection holds");
        let Event::Incoming(Packet::Publish(answer)) = event else {
            continue;
        };
        let status: u16 = answer.topic.split('/').nth(3).unwrap().parse().unwrap();
        let body: Value = serde_json::from_slice(&answer.payload).unwrap();
        if status != 202 {
            let _ = client.disconnect().await;
            return (status, body);
        }
        let retry_after: u64 = answer
            .topic
            .split("retry-after=")
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        // The device honours the service's Retry-After on the real clock, as a real one does.
        tokio::time::sleep(Duration::from_secs(retry_after)).await;
        rid += 1;
        let operation = body["operationId"].as_str().unwrap();
        client
            .publish(
                format!(
                    "$dps/registrations/GET/iotdps-get-operationstatus/?$rid={rid}&operationId={operation}"
                ),
                QoS::AtLeastOnce,
                false,
                "",
            )
            .await
            .unwrap();
    }
}

//! The topic and its properties, the dialer per endpoint and credential (system roots,
//! X.509 files, no password with a certificate), IoT Hub's username, and what a QoS 0
//! publish acknowledges.

use super::*;

#[test]
fn topic_carries_the_properties() {
    let created = "2026-11-22T09:15:02.5Z".parse().unwrap();
    assert_eq!(
        event_topic("drone-7", created),
        "devices/drone-7/messages/events/$.ct=application%2Fjson&$.ce=utf-8&iothub-creation-time-utc=2026-11-22T09%3A15%3A02.500Z"
    );
}

fn iothub(endpoint: Endpoint, auth: Auth) -> Result<Dialer, TransportError> {
    let config = TransportConfig {
        endpoint,
        auth,
        ..TransportConfig::plain("hub.azure-devices.net", 8883)
    };
    Dialer::new(config, "drone-7".into(), Clock::new(Duration::from_secs(2)))
}

#[test]
fn tls_and_websockets_load_the_system_roots() {
    let sas = Auth::Sas(SasConfig {
        hub_host: "hub.azure-devices.net".into(),
        key: settings::SecretBytes::new(vec![1, 2, 3]),
        token_ttl: Duration::from_secs(3600),
        renew_fraction: 0.8,
    });
    let tls = iothub(
        Endpoint::Tls {
            host: "hub.azure-devices.net".into(),
            port: 8883,
        },
        sas.clone(),
    )
    .unwrap();
    assert!(matches!(tls.transport, Transport::Tls(_)));
    let (options, renew_after) = tls.options();
    let (username, password) = options.credentials().unwrap();
    assert_eq!(
        username,
        "hub.azure-devices.net/drone-7/?api-version=2021-04-12"
    );
    assert!(
        password
            .starts_with("SharedAccessSignature sr=hub.azure-devices.net%2Fdevices%2Fdrone-7&sig=")
    );
    assert_eq!(renew_after, Some(Duration::from_secs(2880)));
    assert_eq!(options.client_id(), "drone-7");
    assert!(options.clean_session());

    let wss = iothub(
        Endpoint::WebSocket {
            url: "wss://hub.azure-devices.net:443/$iothub/websocket".into(),
        },
        sas,
    )
    .unwrap();
    assert!(matches!(wss.transport, Transport::Wss(_)));
}

#[test]
fn x509_names_the_unusable_file_and_sends_no_password() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    std::fs::write(&cert, "not a certificate").unwrap();
    let x509 = |cert_path: std::path::PathBuf| {
        Auth::X509(X509Config {
            hub_host: "hub.azure-devices.net".into(),
            cert_path,
            key_path: dir.path().join("key.pem"),
        })
    };
    let tls = Endpoint::Tls {
        host: "hub.azure-devices.net".into(),
        port: 8883,
    };
    let err = iothub(tls.clone(), x509(cert.clone()))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("cert.pem") && err.contains("CERTIFICATE"),
        "{err}"
    );
    let err = iothub(tls, x509(dir.path().join("missing.pem")))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("missing.pem"), "{err}");

    // Over plain TCP (a test broker) the X.509 username goes without a password.
    let plain = iothub(
        Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 1883,
        },
        x509(cert),
    )
    .unwrap();
    let (options, renew_after) = plain.options();
    assert_eq!(
        options.credentials(),
        Some((
            "hub.azure-devices.net/drone-7/?api-version=2021-04-12".into(),
            String::new()
        ))
    );
    assert_eq!(renew_after, None);
}

/// Twin and method messages go with QoS 0 among the positions: rumqttc reports them as
/// written with packet id 0, which names no buffered record.
#[test]
fn a_qos_0_publish_among_positions_acknowledges_no_record() {
    use rumqttc::{MqttState, PubAck, Publish, Request};
    let (client, _eventloop) = AsyncClient::new(MqttOptions::new("d", "h", 1), 8);
    let publisher = Publisher {
        client,
        inflight: Arc::default(),
    };
    let mut state = MqttState::new(10, false, 1 << 20);
    let mut acked = Vec::new();
    let mut feed = |state: &mut MqttState| {
        for event in state.events.drain(..) {
            acked.extend(publisher.on_event(&event));
        }
    };
    for (record, qos) in [
        (7, QoS::AtLeastOnce),
        (0, QoS::AtMostOnce),
        (8, QoS::AtLeastOnce),
    ] {
        if qos == QoS::AtLeastOnce {
            assert!(publisher.publish(record, "t".into(), Vec::new()));
        }
        state
            .handle_outgoing_packet(Request::Publish(Publish::new("t", qos, vec![])))
            .unwrap();
        feed(&mut state);
    }
    for pkid in [2, 1] {
        state
            .handle_incoming_packet(Incoming::PubAck(PubAck::new(pkid)))
            .unwrap();
        feed(&mut state);
    }
    assert_eq!(acked, vec![8, 7]);
    assert_eq!(publisher.in_flight(), 0);
}

#[test]
fn username_follows_the_iothub_form() {
    assert_eq!(
        iothub_username("hub.azure-devices.net", "drone-7"),
        "hub.azure-devices.net/drone-7/?api-version=2021-04-12"
    );
}

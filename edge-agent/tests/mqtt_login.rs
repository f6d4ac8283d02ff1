//! Plain MQTT with a login against a real Mosquitto set up as `deploy/mosquitto` ships it:
//! no anonymous clients, a password file made by `mosquitto_passwd`, the shipped per-user
//! ACL, and a TLS listener. The agent (the binary, as shipped) reaches a subscriber over
//! `mqtts://` with its user name and a password file; an agent with drone A's login that
//! claims drone B's id is held to A's topic: nothing of it reaches B's subscribers, which
//! a later marker on B's topic shows without a sleep.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{Running, TIMEOUT};
use edge_agent::{Secret, Settings};
use rumqttc::{AsyncClient, Event, Incoming, MqttOptions, QoS};
use test_harness::{Mosquitto, MosquittoConfig, TlsListener, write_password_file};
use tokio::sync::mpsc;

fn shipped(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/mosquitto")
        .join(file)
}

fn password(user: &str) -> String {
    format!("{user}-password")
}

/// A CA and a server certificate for 127.0.0.1 in `dir` (`ca.pem`, `server.pem`,
/// `server-key.pem`), a client certificate of drone A (`drone-a.pem`, `drone-a-key.pem`),
/// and a broker with the shipped access rules and a TLS listener that takes clients
/// without a certificate (as shipped) or, with `require_certificate`, refuses them.
fn broker(dir: &Path, require_certificate: bool) -> Mosquitto {
    let ca = hub_sim::Ca::generate().unwrap();
    let server = ca
        .issue(&["127.0.0.1".into(), "localhost".into()], "broker")
        .unwrap();
    std::fs::write(dir.join("ca.pem"), &ca.cert_pem).unwrap();
    std::fs::write(dir.join("server.pem"), &server.cert_pem).unwrap();
    std::fs::write(dir.join("server-key.pem"), &server.key_pem).unwrap();
    let client = ca.issue(&[], "drone-a").unwrap();
    std::fs::write(dir.join("drone-a.pem"), &client.cert_pem).unwrap();
    std::fs::write(dir.join("drone-a-key.pem"), &client.key_pem).unwrap();
    let passwd = dir.join("passwd");
    let users = ["cloud-writer", "drone-a", "drone-b"].map(|u| (u, password(u)));
    let users: Vec<(&str, &str)> = users.iter().map(|(u, p)| (*u, p.as_str())).collect();
    write_password_file(&passwd, &users).unwrap();
    MosquittoConfig::default()
        .access(&passwd, &shipped("acl"))
        .tls(TlsListener {
            ca_file: dir.join("ca.pem"),
            cert_file: dir.join("server.pem"),
            key_file: dir.join("server-key.pem"),
            require_certificate,
        })
        .start()
        .unwrap()
}

/// A client logged in as `user` on the plain listener; subscribed to `filter` when given
/// (SUBACK awaited). Returns the client and every publish it receives as (topic, payload).
async fn client_as(
    broker: &Mosquitto,
    user: &str,
    filter: Option<&str>,
) -> (AsyncClient, mpsc::UnboundedReceiver<(String, Vec<u8>)>) {
    let mut options = MqttOptions::new(format!("{user}-test"), broker.host(), broker.port());
    options.set_credentials(user, password(user));
    let (client, mut eventloop) = AsyncClient::new(options, 16);
    if let Some(filter) = filter {
        client.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let (ready_tx, mut ready_rx) = mpsc::channel(1);
    let subscribing = filter.is_some();
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Incoming::ConnAck(_))) if !subscribing => {
                    let _ = ready_tx.try_send(());
                }
                Ok(Event::Incoming(Incoming::SubAck(_))) => {
                    let _ = ready_tx.try_send(());
                }
                Ok(Event::Incoming(Incoming::Publish(p))) => {
                    let _ = tx.send((p.topic.clone(), p.payload.to_vec()));
                }
                Ok(_) => {}
                Err(err) => panic!("{err}"),
            }
        }
    });
    tokio::time::timeout(TIMEOUT, ready_rx.recv())
        .await
        .expect("connected (and subscribed) in time");
    (client, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<(String, Vec<u8>)>) -> (String, Vec<u8>) {
    tokio::time::timeout(TIMEOUT, rx.recv())
        .await
        .expect("a message in time")
        .expect("the client runs")
}

#[test]
fn the_shipped_broker_has_a_tls_listener_and_no_anonymous_clients() {
    let conf = std::fs::read_to_string(shipped("mosquitto.conf")).unwrap();
    let lines: Vec<&str> = conf
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let tls = lines
        .iter()
        .position(|l| *l == "listener 8883")
        .expect("a TLS listener on 8883");
    let block: Vec<&str> = lines[tls + 1..]
        .iter()
        .take_while(|l| !l.starts_with("listener"))
        .copied()
        .collect();
    // What the broker of the test above is started with.
    for key in [
        "certfile ",
        "keyfile ",
        "cafile ",
        "require_certificate false",
    ] {
        assert!(
            block.iter().any(|l| l.starts_with(key)),
            "{key} in {block:?}"
        );
    }
    for line in [
        "allow_anonymous false",
        "password_file /etc/mosquitto/passwd",
        "acl_file /etc/mosquitto/acl",
    ] {
        assert!(lines.contains(&line), "{line} missing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drone_logs_in_over_tls_and_cannot_publish_as_another() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), false);
    let tls_url = format!("mqtts://127.0.0.1:{}", broker.tls_port().unwrap());
    let (_writer, mut received) =
        client_as(&broker, "cloud-writer", Some("devices/+/messages/events/#")).await;

    // Drone A's agent, as shipped: its password from a file, the broker's CA trusted.
    let password_file = dir.path().join("drone-a.password");
    std::fs::write(&password_file, format!("{}\n", password("drone-a"))).unwrap();
    let log = std::fs::File::create(dir.path().join("drone-a.log")).unwrap();
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_edge-agent"))
        .env_clear()
        .env("MQTT_URL", &tls_url)
        .env("DEVICE_ID", "drone-a")
        .env("MQTT_USERNAME", "drone-a")
        .env("MQTT_PASSWORD_FILE", &password_file)
        .env("IOTHUB_CA_FILE", dir.path().join("ca.pem"))
        .env("POSITION_SOURCE", "sim")
        .env("REPORT_INTERVAL", "200ms")
        .env("BUFFER_DIR", dir.path().join("a"))
        .env("BUFFER_FSYNC", "false")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (topic, _) = next(&mut received).await;
    assert!(
        topic.starts_with("devices/drone-a/messages/events/"),
        "{topic}"
    );
    agent.start_kill().unwrap();
    agent.wait().await.unwrap();
    let log = std::fs::read_to_string(dir.path().join("drone-a.log")).unwrap();
    assert!(!log.contains(&password("drone-a")), "{log}");

    // Drone A's login claiming drone B's id: the broker takes the connection and
    // acknowledges the publishes (MQTT 3.1.1 has no way to refuse one) but drops them.
    let settings = Settings {
        position_source: Some("sim".into()),
        report_interval: Some("100ms".parse().unwrap()),
        mqtt_url: Some(tls_url.clone()),
        device_id: Some("drone-b".into()),
        mqtt_username: Some("drone-a".into()),
        mqtt_password: Some(Secret::new(password("drone-a"))),
        iothub_ca_file: Some(dir.path().join("ca.pem")),
        buffer_dir: Some(dir.path().join("impostor")),
        buffer_fsync: Some(false),
        ..Settings::default()
    };
    let impostor = Running::start(settings.resolve().unwrap());
    impostor
        .wait_for("three publishes acknowledged", |s| s.acked >= 3)
        .await;
    // Each acknowledged publish was routed (or dropped) before its PUBACK; a marker
    // published now on B's topic by B reaches the subscriber after anything routed then.
    let (drone_b, _) = client_as(&broker, "drone-b", None).await;
    drone_b
        .publish(
            "devices/drone-b/messages/events/",
            QoS::AtLeastOnce,
            false,
            b"marker".to_vec(),
        )
        .await
        .unwrap();
    loop {
        let (topic, payload) = next(&mut received).await;
        if payload == b"marker" {
            break;
        }
        assert!(
            !topic.starts_with("devices/drone-b/"),
            "drone A's login published on drone B's topic: {topic}"
        );
    }
    impostor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_requires_a_client_certificate_takes_the_agents_x509_settings() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path(), true);
    let (_writer, mut received) =
        client_as(&broker, "cloud-writer", Some("devices/+/messages/events/#")).await;
    let settings = |cert: bool| Settings {
        position_source: Some("sim".into()),
        report_interval: Some("100ms".parse().unwrap()),
        mqtt_url: Some(format!("mqtts://127.0.0.1:{}", broker.tls_port().unwrap())),
        device_id: Some("drone-a".into()),
        mqtt_username: Some("drone-a".into()),
        mqtt_password: Some(Secret::new(password("drone-a"))),
        iothub_ca_file: Some(dir.path().join("ca.pem")),
        x509_cert_file: cert.then(|| dir.path().join("drone-a.pem")),
        x509_key_file: cert.then(|| dir.path().join("drone-a-key.pem")),
        buffer_dir: Some(dir.path().join(if cert { "with" } else { "without" })),
        buffer_fsync: Some(false),
        ..Settings::default()
    };
    // Without its certificate the broker refuses the handshake.
    let refused = Running::start(settings(false).resolve().unwrap());
    broker
        .wait_for_log("peer did not return a certificate", TIMEOUT)
        .unwrap();
    assert_eq!(refused.stop().await.acked, 0);
    let agent = Running::start(settings(true).resolve().unwrap());
    let (topic, _) = next(&mut received).await;
    assert!(
        topic.starts_with("devices/drone-a/messages/events/"),
        "{topic}"
    );
    agent.stop().await;
}

//! The harness's Mosquitto against a real MQTT client (rumqttc): delivery, restarts on
//! the same port, persistent sessions across restarts, and cleanup.

use std::time::{Duration, Instant};

use rumqttc::{Client, Connection, Event, Incoming, MqttOptions, Outgoing, QoS, Transport};
use test_harness::{Mosquitto, MosquittoConfig, eventually_blocking, process_running};

const TIMEOUT: Duration = Duration::from_secs(10);

fn options(id: &str, host: &str, port: u16, clean_session: bool) -> MqttOptions {
    let mut options = MqttOptions::new(id, host, port);
    options
        .set_clean_session(clean_session)
        .set_keep_alive(Duration::from_secs(30));
    options
}

fn client(broker: &Mosquitto, id: &str, clean_session: bool) -> (Client, Connection) {
    Client::new(options(id, broker.host(), broker.port(), clean_session), 16)
}

/// Drives `connection` until `matches` accepts an event; panics on a connection error
/// or after `TIMEOUT`.
fn wait_for<T>(connection: &mut Connection, mut matches: impl FnMut(&Event) -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no matching MQTT event within {TIMEOUT:?}");
        match connection.recv_timeout(left) {
            Ok(Ok(event)) => {
                if let Some(found) = matches(&event) {
                    return found;
                }
            }
            Ok(Err(err)) => panic!("MQTT connection failed: {err}"),
            Err(err) => panic!("no matching MQTT event: {err:?}"),
        }
    }
}

/// Waits for CONNACK and returns its session-present flag.
fn connected(connection: &mut Connection) -> bool {
    wait_for(connection, |event| match event {
        Event::Incoming(Incoming::ConnAck(ack)) => Some(ack.session_present),
        _ => None,
    })
}

fn subscribed(connection: &mut Connection) {
    wait_for(connection, |event| {
        matches!(event, Event::Incoming(Incoming::SubAck(_))).then_some(())
    });
}

fn publish_acked(client: &Client, connection: &mut Connection, topic: &str, payload: &[u8]) {
    client
        .publish(topic, QoS::AtLeastOnce, false, payload.to_vec())
        .expect("queue publish");
    wait_for(connection, |event| {
        matches!(event, Event::Incoming(Incoming::PubAck(_))).then_some(())
    });
}

fn received(connection: &mut Connection) -> (String, Vec<u8>) {
    wait_for(connection, |event| match event {
        Event::Incoming(Incoming::Publish(publish)) => {
            Some((publish.topic.clone(), publish.payload.to_vec()))
        }
        _ => None,
    })
}

/// Disconnects cleanly and waits until the broker has logged it.
fn disconnect(broker: &Mosquitto, id: &str, client: &Client, connection: &mut Connection) {
    client.disconnect().expect("queue disconnect");
    wait_for(connection, |event| {
        matches!(event, Event::Outgoing(Outgoing::Disconnect)).then_some(())
    });
    broker
        .wait_for_log(&format!("Client {id} disconnected"), TIMEOUT)
        .expect("broker saw the disconnect");
}

#[test]
fn qos1_publish_reaches_a_second_client() {
    let broker = Mosquitto::start().expect("start mosquitto");
    assert_eq!(broker.url(), format!("mqtt://127.0.0.1:{}", broker.port()));

    let (sub, mut sub_conn) = client(&broker, "reader", true);
    connected(&mut sub_conn);
    sub.subscribe("drones/+/position", QoS::AtLeastOnce)
        .unwrap();
    subscribed(&mut sub_conn);

    let (publisher, mut pub_conn) = client(&broker, "writer", true);
    connected(&mut pub_conn);
    publish_acked(
        &publisher,
        &mut pub_conn,
        "drones/d1/position",
        b"47.66,-122.12",
    );

    assert_eq!(
        received(&mut sub_conn),
        ("drones/d1/position".to_owned(), b"47.66,-122.12".to_vec())
    );
}

#[test]
fn kill_then_restart_serves_the_same_port() {
    let mut broker = Mosquitto::start().expect("start mosquitto");
    let port = broker.port();
    let (_client, mut conn) = client(&broker, "before", true);
    connected(&mut conn);
    let pid = broker.pid().unwrap();

    broker.kill().unwrap();
    assert!(!broker.is_running());
    assert!(!process_running(pid));
    // The client's socket closes now: the broker's side of the connection is left in
    // TIME_WAIT on the port, which the restart must bind again.
    drop(conn);

    broker.restart().expect("restart mosquitto");
    assert!(broker.is_running());
    assert_eq!(broker.port(), port);
    let (_client, mut conn) = client(&broker, "after", true);
    connected(&mut conn);
}

/// A persistent subscriber that is offline while a QoS 1 message is published gets it
/// when it comes back, also when the broker restarted (gracefully) in between.
#[test]
fn persistent_session_gets_queued_message_across_graceful_restart() {
    let mut broker = Mosquitto::start().expect("start mosquitto");

    let (sub, mut sub_conn) = client(&broker, "durable", false);
    assert!(!connected(&mut sub_conn), "fresh broker has no session");
    sub.subscribe("fleet/cmd", QoS::AtLeastOnce).unwrap();
    subscribed(&mut sub_conn);
    disconnect(&broker, "durable", &sub, &mut sub_conn);
    drop(sub_conn);

    let (publisher, mut pub_conn) = client(&broker, "sender", true);
    connected(&mut pub_conn);
    publish_acked(&publisher, &mut pub_conn, "fleet/cmd", b"return-home");
    drop(pub_conn);

    broker.restart().expect("restart mosquitto");

    let (_sub, mut sub_conn) = client(&broker, "durable", false);
    assert!(connected(&mut sub_conn), "session survived the restart");
    assert_eq!(
        received(&mut sub_conn),
        ("fleet/cmd".to_owned(), b"return-home".to_vec())
    );
}

/// With `save_every_change`, the queued message also survives SIGKILL.
#[test]
fn save_every_change_keeps_queued_message_across_kill() {
    let mut broker = MosquittoConfig::default()
        .save_every_change(true)
        .start()
        .expect("start mosquitto");

    let (sub, mut sub_conn) = client(&broker, "durable-k", false);
    connected(&mut sub_conn);
    sub.subscribe("fleet/cmd", QoS::AtLeastOnce).unwrap();
    subscribed(&mut sub_conn);
    disconnect(&broker, "durable-k", &sub, &mut sub_conn);
    drop(sub_conn);

    let (publisher, mut pub_conn) = client(&broker, "sender-k", true);
    connected(&mut pub_conn);
    publish_acked(&publisher, &mut pub_conn, "fleet/cmd", b"land");
    drop(pub_conn);
    // The database is written in the broker's main loop after the change; wait for the
    // write to show up before killing.
    let db = broker.dir().join("mosquitto.db");
    eventually_blocking(
        "the database to hold the message",
        TIMEOUT,
        || std::fs::read(&db).is_ok_and(|bytes| bytes.windows(4).any(|w| w == b"land")),
        |held| *held,
    );

    broker.kill().unwrap();
    broker.restart().expect("restart mosquitto");

    let (_sub, mut sub_conn) = client(&broker, "durable-k", false);
    assert!(connected(&mut sub_conn), "session survived the kill");
    assert_eq!(
        received(&mut sub_conn),
        ("fleet/cmd".to_owned(), b"land".to_vec())
    );
}

#[test]
fn websockets_listener_carries_mqtt() {
    let broker = MosquittoConfig::default()
        .websockets(true)
        .start()
        .expect("start mosquitto");
    let ws_url = broker.ws_url().expect("websockets listener");
    let mut ws_options = options("ws-reader", &ws_url, broker.ws_port().unwrap(), true);
    ws_options.set_transport(Transport::Ws);
    let (sub, mut sub_conn) = Client::new(ws_options, 16);
    connected(&mut sub_conn);
    sub.subscribe("ws/t", QoS::AtLeastOnce).unwrap();
    subscribed(&mut sub_conn);

    let (publisher, mut pub_conn) = client(&broker, "tcp-writer", true);
    connected(&mut pub_conn);
    publish_acked(&publisher, &mut pub_conn, "ws/t", b"hello");
    assert_eq!(
        received(&mut sub_conn),
        ("ws/t".to_owned(), b"hello".to_vec())
    );
}

#[test]
fn broker_is_gone_after_drop_and_after_panic() {
    let broker = Mosquitto::start().expect("start mosquitto");
    let pid = broker.pid().unwrap();
    assert!(process_running(pid));
    drop(broker);
    assert!(!process_running(pid));

    let (pid_tx, pid_rx) = std::sync::mpsc::channel();
    let result = std::panic::catch_unwind(move || {
        let broker = Mosquitto::start().expect("start mosquitto");
        pid_tx.send(broker.pid().unwrap()).unwrap();
        panic!("test failure while the broker runs");
    });
    assert!(result.is_err());
    let pid = pid_rx.recv().unwrap();
    assert!(!process_running(pid));
}

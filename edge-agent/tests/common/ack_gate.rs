//! A TCP relay between an agent and a real Mosquitto that can withhold the broker's
//! PUBACKs, so that acknowledgements reach the agent out of order (as some brokers send
//! them). It also records every PUBLISH the agent wrote: packet id and `seq`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::task::AbortOnDropHandle;

/// One PUBLISH as the relay passed it to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub pkid: u16,
    pub seq: u64,
}

#[derive(Default)]
struct State {
    /// Packet ids whose next PUBACK is withheld.
    hold: HashSet<u16>,
    /// Withheld PUBACK packets, in arrival order.
    withheld: Vec<Vec<u8>>,
    published: Vec<Published>,
}

/// The relay; one client connection at a time.
pub struct AckGate {
    port: u16,
    state: Arc<Mutex<State>>,
    client: Arc<tokio::sync::Mutex<Option<OwnedWriteHalf>>>,
    /// Bumped at every PUBLISH passed and every PUBACK withheld.
    changes: tokio::sync::watch::Receiver<u64>,
    _task: AbortOnDropHandle<()>,
}

impl AckGate {
    /// Relays 127.0.0.1:{port()} to the broker on `broker_port`.
    pub async fn start(broker_port: u16) -> AckGate {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let client = Arc::new(tokio::sync::Mutex::new(None));
        let (changes_tx, changes) = tokio::sync::watch::channel(0);
        let task = tokio::spawn(accept(
            listener,
            broker_port,
            state.clone(),
            client.clone(),
            changes_tx,
        ));
        AckGate {
            port,
            state,
            client,
            changes,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// The port agents connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Withholds the next PUBACK for `pkid`.
    pub fn hold_next(&self, pkid: u16) {
        self.state.lock().unwrap().hold.insert(pkid);
    }

    /// Waits until a PUBACK is withheld, then sends the withheld PUBACKs to the agent
    /// (a later [`AckGate::hold_next`] stays in force).
    pub async fn release(&self) {
        self.wait_until("a withheld PUBACK", |state| !state.withheld.is_empty())
            .await;
        let withheld = std::mem::take(&mut self.state.lock().unwrap().withheld);
        let mut client = self.client.lock().await;
        let writer = client.as_mut().expect("an agent is connected");
        for packet in withheld {
            writer.write_all(&packet).await.unwrap();
        }
    }

    /// How many PUBACKs are withheld now.
    pub fn withheld(&self) -> usize {
        self.state.lock().unwrap().withheld.len()
    }

    /// Waits until `n` PUBLISH packets passed, at most [`super::TIMEOUT`].
    pub async fn wait_published(&self, n: usize) -> Vec<Published> {
        self.wait_until("publishes", |state| state.published.len() >= n)
            .await;
        self.published()
    }

    async fn wait_until(&self, what: &str, ready: impl Fn(&State) -> bool) {
        let mut changes = self.changes.clone();
        let waited = tokio::time::timeout(super::TIMEOUT, async {
            while !ready(&self.state.lock().unwrap()) {
                changes.changed().await.unwrap();
            }
        });
        if waited.await.is_err() {
            panic!("timed out waiting for {what}: {:?}", self.published());
        }
    }

    /// Every PUBLISH the agent wrote so far.
    pub fn published(&self) -> Vec<Published> {
        self.state.lock().unwrap().published.clone()
    }
}

async fn accept(
    listener: TcpListener,
    broker_port: u16,
    state: Arc<Mutex<State>>,
    client: Arc<tokio::sync::Mutex<Option<OwnedWriteHalf>>>,
    changes: tokio::sync::watch::Sender<u64>,
) {
    loop {
        let Ok((agent, _)) = listener.accept().await else {
            return;
        };
        let Ok(broker) = TcpStream::connect(("127.0.0.1", broker_port)).await else {
            continue;
        };
        let (mut agent_read, agent_write) = agent.into_split();
        let (mut broker_read, mut broker_write) = broker.into_split();
        *client.lock().await = Some(agent_write);
        let upstream_state = state.clone();
        let changes = &changes;
        let upstream = async move {
            let mut buf = Vec::new();
            while read_more(&mut agent_read, &mut buf).await {
                while let Some(packet) = next_packet(&mut buf) {
                    if let Some(published) = publish_of(&packet) {
                        upstream_state.lock().unwrap().published.push(published);
                        changes.send_modify(|c| *c += 1);
                    }
                    if broker_write.write_all(&packet).await.is_err() {
                        return;
                    }
                }
            }
        };
        let downstream_state = state.clone();
        let downstream_client = client.clone();
        let downstream = async move {
            let mut buf = Vec::new();
            while read_more(&mut broker_read, &mut buf).await {
                while let Some(packet) = next_packet(&mut buf) {
                    if packet[0] == 0x40 && packet.len() == 4 {
                        let pkid = u16::from_be_bytes([packet[2], packet[3]]);
                        let mut state = downstream_state.lock().unwrap();
                        if state.hold.remove(&pkid) {
                            state.withheld.push(packet);
                            changes.send_modify(|c| *c += 1);
                            continue;
                        }
                    }
                    let mut client = downstream_client.lock().await;
                    let Some(writer) = client.as_mut() else {
                        return;
                    };
                    if writer.write_all(&packet).await.is_err() {
                        return;
                    }
                }
            }
        };
        tokio::join!(upstream, downstream);
        *client.lock().await = None;
    }
}

async fn read_more(reader: &mut tokio::net::tcp::OwnedReadHalf, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    match reader.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// Splits one whole MQTT packet off the front of `buf`.
fn next_packet(buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut len = 0usize;
    let mut shift = 0;
    let mut at = 1;
    loop {
        let byte = *buf.get(at)?;
        len |= usize::from(byte & 0x7f) << shift;
        at += 1;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    if buf.len() < at + len {
        return None;
    }
    Some(buf.drain(..at + len).collect())
}

/// The packet id and `seq` of a QoS 1 PUBLISH packet.
fn publish_of(packet: &[u8]) -> Option<Published> {
    if packet[0] & 0xf0 != 0x30 || (packet[0] >> 1) & 3 == 0 {
        return None;
    }
    let mut at = 1;
    while packet[at] & 0x80 != 0 {
        at += 1;
    }
    at += 1;
    let topic_len = usize::from(u16::from_be_bytes([packet[at], packet[at + 1]]));
    at += 2 + topic_len;
    let pkid = u16::from_be_bytes([packet[at], packet[at + 1]]);
    let position = telemetry::wire::decode(&packet[at + 2..]).expect("a valid message");
    Some(Published {
        pkid,
        seq: position.seq,
    })
}

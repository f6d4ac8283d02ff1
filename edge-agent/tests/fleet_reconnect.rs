//! 100 agents lose their broker at the same moment: their reconnect attempts spread over
//! the backoff window instead of arriving together.
//!
//! The agents reach Mosquitto through a relay in this test that can cut every link at
//! once and then refuse connections, recording when each agent (named by the client id
//! of its CONNECT packet) tried again.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Running, sim_config};
use edge_agent::ConnectionState;
use retry_backoff::BackoffConfig;
use test_harness::Mosquitto;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

const AGENTS: usize = 100;
/// The first backoff window; far wider than the few hundred milliseconds 100 agents on
/// two cores take to notice the loss, so that lock-step retries cannot look spread.
const BASE: Duration = Duration::from_secs(2);

/// A TCP relay to the broker that records connection attempts.
struct Relay {
    port: u16,
    open: Arc<AtomicBool>,
    links: Arc<Mutex<JoinSet<()>>>,
    /// (client id, time) of every connection refused while closed.
    refused: Arc<Mutex<Vec<(String, Instant)>>>,
    /// Changes whenever a refused attempt is recorded.
    attempts: watch::Receiver<()>,
}

impl Relay {
    async fn start(broker_port: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let links = Arc::new(Mutex::new(JoinSet::new()));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let (attempt_tx, attempts) = watch::channel(());
        let attempt_tx = Arc::new(attempt_tx);
        let relay = Relay {
            port,
            open: open.clone(),
            links: links.clone(),
            refused: refused.clone(),
            attempts,
        };
        tokio::spawn(async move {
            loop {
                let (mut agent_side, _) = listener.accept().await.unwrap();
                let at = Instant::now();
                if open.load(Ordering::SeqCst) {
                    links.lock().unwrap().spawn(async move {
                        let mut broker_side = TcpStream::connect(("127.0.0.1", broker_port))
                            .await
                            .unwrap();
                        let _ =
                            tokio::io::copy_bidirectional(&mut agent_side, &mut broker_side).await;
                    });
                } else {
                    let refused = refused.clone();
                    let attempt_tx = attempt_tx.clone();
                    tokio::spawn(async move {
                        if let Some(id) = read_client_id(&mut agent_side).await {
                            refused.lock().unwrap().push((id, at));
                            attempt_tx.send_replace(());
                        }
                    });
                }
            }
        });
        relay
    }

    /// Cuts every link at once and refuses new ones.
    fn cut(&self) -> Instant {
        self.open.store(false, Ordering::SeqCst);
        self.links.lock().unwrap().abort_all();
        Instant::now()
    }

    fn reopen(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// Reads the client id from an MQTT 3.1.1 CONNECT packet.
async fn read_client_id(stream: &mut TcpStream) -> Option<String> {
    let mut packet = vec![0u8; 512];
    let mut len = 0;
    let read = async {
        loop {
            let n = stream.read(&mut packet[len..]).await.ok()?;
            if n == 0 {
                return None;
            }
            len += n;
            if let Some(id) = parse_client_id(&packet[..len]) {
                return Some(id);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()?
}

fn parse_client_id(bytes: &[u8]) -> Option<String> {
    if bytes.first()? != &0x10 {
        return None;
    }
    // Remaining length (variable byte integer).
    let mut pos = 1;
    while bytes.get(pos)? & 0x80 != 0 {
        pos += 1;
    }
    pos += 1;
    // Protocol name, level, flags, keep-alive.
    let name_len = u16::from_be_bytes([*bytes.get(pos)?, *bytes.get(pos + 1)?]) as usize;
    pos += 2 + name_len + 1 + 1 + 2;
    let id_len = u16::from_be_bytes([*bytes.get(pos)?, *bytes.get(pos + 1)?]) as usize;
    let id = bytes.get(pos + 2..pos + 2 + id_len)?;
    String::from_utf8(id.to_vec()).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_that_loses_its_broker_together_does_not_come_back_in_lock_step() {
    let broker = Mosquitto::start().unwrap();
    let relay = Relay::start(broker.port()).await;
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<Running> = (0..AGENTS)
        .map(|i| {
            let id = format!("drone-{i:03}");
            let mut config = sim_config(&id, relay.port, &dir.path().join(&id));
            config.report_interval = Duration::from_millis(500);
            config.transport.backoff = BackoffConfig {
                base: BASE,
                cap: Duration::from_secs(4),
            };
            Running::start(config)
        })
        .collect();
    for agent in &agents {
        agent
            .wait_for("connected", |s| s.connection == ConnectionState::Connected)
            .await;
    }

    let mut attempts = relay.attempts.clone();
    let cut = relay.cut();
    // Wait until every agent tried again.
    let first_attempts = loop {
        let refused = relay.refused.lock().unwrap().clone();
        let mut per_agent: HashMap<String, Vec<Instant>> = HashMap::new();
        for (id, at) in refused {
            per_agent.entry(id).or_default().push(at);
        }
        if per_agent.len() == AGENTS {
            break per_agent
                .values()
                .map(|times| *times.iter().min().unwrap() - cut)
                .collect::<Vec<Duration>>();
        }
        tokio::time::timeout(Duration::from_secs(20), attempts.changed())
            .await
            .expect("agents keep retrying")
            .unwrap();
    };

    // Full jitter: the first retries spread over the first window [0, BASE].
    let earliest = *first_attempts.iter().min().unwrap();
    let latest = *first_attempts.iter().max().unwrap();
    assert!(
        latest - earliest >= BASE / 2,
        "first retries within {:?} of each other",
        latest - earliest
    );
    let bucket = BASE / 10;
    let mut buckets: HashMap<u128, usize> = HashMap::new();
    for delay in &first_attempts {
        *buckets
            .entry(delay.as_nanos() / bucket.as_nanos())
            .or_default() += 1;
    }
    let crowded = *buckets.values().max().unwrap();
    assert!(
        crowded <= AGENTS * 35 / 100,
        "{crowded} of {AGENTS} first retries within the same {bucket:?}: {buckets:?}"
    );

    // Back in service: everyone reconnects.
    relay.reopen();
    for agent in &agents {
        agent
            .wait_for("reconnected", |s| {
                s.connection == ConnectionState::Connected && s.connections >= 2
            })
            .await;
    }
    for agent in agents {
        agent.stop().await;
    }
}

//! One test's set-up: Mosquitto and a subscriber, the flight controller and the agent
//! on free ports, and the publications collected as they arrive.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;
use telemetry::wire::Position;
use test_harness::{Mosquitto, eventually, free_udp_port};

use crate::agent::{AgentProcess, DEVICE_ID};
use crate::common::{Subscriber, TIMEOUT};
use crate::expect::{self, describe, expected_positions};
use crate::peer::{self, FlightController, Tail, events};

/// The longest any test here may take.
const WHOLE_TEST: Duration = Duration::from_secs(180);

/// How the agent reaches the flight controller.
#[derive(Debug, Clone, Copy)]
pub enum Link {
    /// The agent listens (`udpin:`); the flight controller sends to it (`--udpout`).
    AgentUdpin,
    /// The flight controller listens on TCP; the agent connects (`tcpout:`).
    AgentTcpout,
    /// A router's server-mode endpoint (`--server`), sending only to peers that spoke:
    /// the agent speaks first (`udpout:`).
    RouterServer,
    /// A pty pair: the agent opens the slave (`serial:PATH:921600`).
    Serial,
}

/// Broker, subscriber, flight controller and agent of one test.
pub struct Rig {
    // Dropped first: the agent, then the flight controller, then the broker.
    pub agent: AgentProcess,
    pub peer: FlightController,
    subscriber: Subscriber,
    _broker: Mosquitto,
    /// Every position published so far, in order of arrival.
    pub published: Vec<Position>,
}

impl Rig {
    pub async fn start(link: Link, peer_args: &[&str], agent_env: &[(&str, &str)]) -> Rig {
        let broker = Mosquitto::start().unwrap();
        let subscriber = Subscriber::connect(&broker, "sub-mavlink").await;
        let mut args: Vec<String> = peer_args.iter().map(|a| a.to_string()).collect();
        let (peer, address) = match link {
            Link::AgentUdpin => {
                let port = free_udp_port();
                args.extend(["--udpout".into(), format!("127.0.0.1:{port}")]);
                let peer = FlightController::start(&args).await;
                (peer, format!("udpin:127.0.0.1:{port}"))
            }
            Link::AgentTcpout => {
                args.extend(["--tcp-listen".into(), "127.0.0.1:0".into()]);
                let peer = FlightController::start(&args).await;
                let address = format!("tcpout:{}", peer.address());
                (peer, address)
            }
            Link::RouterServer => {
                args.extend(["--server".into(), "127.0.0.1:0".into()]);
                let peer = FlightController::start(&args).await;
                let address = format!("udpout:{}", peer.address());
                (peer, address)
            }
            Link::Serial => {
                args.push("--serial-pty".into());
                let peer = FlightController::start(&args).await;
                let address = format!("serial:{}:921600", peer.device());
                (peer, address)
            }
        };
        let agent = AgentProcess::start(&broker, &address, agent_env);
        Rig {
            agent,
            peer,
            subscriber,
            _broker: broker,
            published: Vec::new(),
        }
    }

    /// Receives publications until `done` holds for them and the flight controller's
    /// lines; panics after [`TIMEOUT`] with what the agent reported.
    pub async fn collect(
        &mut self,
        what: &str,
        mut done: impl FnMut(&[Position], &[Value]) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        let topic = format!("devices/{DEVICE_ID}/messages/events/");
        while !done(&self.published, &self.peer.lines()) {
            self.agent.assert_running();
            if tokio::time::Instant::now() > deadline {
                self.fail(&format!("timed out waiting for {what}"));
            }
            let wait = tokio::time::timeout(Duration::from_millis(100), self.subscriber.rx.recv());
            if let Ok(received) = wait.await {
                let received = received.expect("subscriber running");
                assert!(received.topic.starts_with(&topic), "{}", received.topic);
                assert_eq!(received.position.device_id, DEVICE_ID);
                self.published.push(received.position);
            }
        }
    }

    /// Publications until at least `count` arrived, `distinct` of them at different places.
    pub async fn collect_positions(&mut self, count: usize, distinct: usize) {
        let what = format!("{count} positions published, {distinct} of them distinct");
        self.collect(&what, |published, _| {
            published.len() >= count && distinct_places(published) >= distinct
        })
        .await;
    }

    /// Asserts that every position published so far is one that `system_id`'s autopilot
    /// (component 1) sent (with
    /// its GPS time when `with_time`). The flight controller writes each line before it
    /// sends the message, so its lines are waited for, not the other way round.
    pub async fn assert_published_were_sent(
        &mut self,
        system_id: u64,
        with_time: bool,
    ) -> Vec<expect::Expected> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let expected: Vec<_> = expected_positions(&self.peer.lines())
                .into_iter()
                .filter(|e| e.system_id == system_id && e.component_id == 1)
                .collect();
            let unmatched: Vec<&Position> = self
                .published
                .iter()
                .filter(|p| !expected.iter().any(|e| e.matches(p, with_time)))
                .collect();
            if unmatched.is_empty() {
                return expected;
            }
            if tokio::time::Instant::now() > deadline {
                let near: Vec<String> = unmatched
                    .iter()
                    .map(|p| {
                        // Of the sends at the same place, the nearest in time.
                        let ts = p.ts.timestamp_millis();
                        let same_place = expected
                            .iter()
                            .filter(|e| e.same_place(p))
                            .min_by_key(|e| e.ts_ms.map_or(i64::MAX, |e| (e - ts).abs()));
                        format!("{}\n    same place sent: {same_place:?}", describe(p))
                    })
                    .collect();
                self.fail(&format!(
                    "{} of {} published positions are not positions system {system_id} sent{}:\n  {}",
                    unmatched.len(),
                    self.published.len(),
                    if with_time { " at their GPS time" } else { "" },
                    near.join("\n  ")
                ));
            }
            // Polls the real flight controller's lines: not `eventually`, because the
            // failure names the nearest sends of each unmatched position.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `ready` holds for the flight controller's lines, checking that the
    /// agent still runs; panics after [`TIMEOUT`] with what both reported.
    pub async fn wait_peer(
        &mut self,
        what: &str,
        mut ready: impl FnMut(&[Value]) -> bool,
    ) -> Vec<Value> {
        let lines = eventually(
            what,
            TIMEOUT,
            async || {
                self.agent.assert_running();
                Tail(self.peer.lines())
            },
            |lines| ready(&lines.0),
        )
        .await;
        lines.0
    }

    pub fn fail(&self, what: &str) -> ! {
        let log = self.agent.log();
        let log_tail: Vec<&str> = log.lines().rev().take(30).collect();
        let published: Vec<String> = self.published.iter().rev().take(5).map(describe).collect();
        panic!(
            "{what}\npublished ({}), last ones:\n  {}\nagent status: {}\nagent log (last lines):\n{}\nflight controller (last lines):\n{}\n{}",
            self.published.len(),
            published.join("\n  "),
            self.agent
                .status()
                .map(|s| s.to_string())
                .unwrap_or_else(|| "none yet".into()),
            log_tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            peer::tail(&self.peer.lines(), 6),
            self.peer.stderr(),
        )
    }
}

pub fn distinct_places(published: &[Position]) -> usize {
    published
        .iter()
        .map(|p| (p.lat.to_bits(), p.lon.to_bits()))
        .collect::<HashSet<_>>()
        .len()
}

/// Positions sent by `system_id` so far (delivered to the link).
pub fn sent_positions(lines: &[Value], system_id: u64, msg: &str) -> usize {
    events(lines, "sent", Some(msg))
        .filter(|l| l["sys"] == system_id && l["delivered"] == true)
        .count()
}

/// Runs a test body within [`WHOLE_TEST`].
pub async fn bounded(test: impl std::future::Future<Output = ()>) {
    tokio::time::timeout(WHOLE_TEST, test)
        .await
        .expect("the test finished in time");
}

//! Helpers of the agent tests: a subscriber on a real Mosquitto, agents with short
//! intervals, waiting on conditions.

#![allow(dead_code)] // Each test file uses a different part.

pub mod ack_gate;

use std::path::Path;
use std::time::Duration;

use edge_agent::{Agent, AgentConfig, AgentHandle, AgentReport, AgentStatus, CancellationToken};
use retry_backoff::BackoffConfig;
use rumqttc::{AsyncClient, Event, Incoming, MqttOptions, QoS};
use telemetry::wire::{Decoded, Position};
use test_harness::Mosquitto;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long any awaited condition may take.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The report interval of the tests.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// A configuration for a simulated drone on `broker` with test timings.
pub fn sim_config(device_id: &str, port: u16, dir: &Path) -> AgentConfig {
    let mut config = AgentConfig::simulated(device_id, "127.0.0.1", port, dir.to_owned());
    config.report_interval = INTERVAL;
    config.max_fix_age = Duration::from_secs(60);
    config.buffer.fsync = false;
    config.backlog_rate = 200.0;
    config.transport.connect_timeout = Duration::from_secs(2);
    config.transport.backoff = BackoffConfig {
        base: Duration::from_millis(50),
        cap: Duration::from_millis(400),
    };
    config
}

/// A running agent.
pub struct Running {
    pub handle: AgentHandle,
    shutdown: CancellationToken,
    task: JoinHandle<Result<AgentReport, edge_agent::AgentError>>,
}

impl Running {
    pub fn start(config: AgentConfig) -> Running {
        let agent = Agent::new(config).expect("agent starts");
        let handle = agent.handle();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(agent.run(shutdown.clone()));
        Running {
            handle,
            shutdown,
            task,
        }
    }

    pub async fn stop(self) -> AgentStatus {
        self.shutdown.cancel();
        self.task
            .await
            .expect("agent task")
            .expect("agent run")
            .status
    }

    pub async fn wait_for(
        &self,
        what: &str,
        ready: impl FnMut(&AgentStatus) -> bool,
    ) -> AgentStatus {
        match self.handle.wait_for(TIMEOUT, ready).await {
            Ok(status) => status,
            Err(status) => panic!("timed out waiting for {what}: {status:#?}"),
        }
    }
}

/// One message as the subscriber saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub topic: String,
    /// The newest position of the message (its only one unless it is a batch).
    pub position: Position,
    /// Every position of the message, oldest first.
    pub positions: Vec<Position>,
    /// The payload's size in bytes.
    pub bytes: usize,
    /// The broker's DUP flag: a redelivery by the broker to this subscriber's session
    /// (after the broker restarted before it saw the subscriber's PUBACK), not a publish
    /// of the agent (each agent link is a fresh client, which never sets it).
    pub dup: bool,
}

/// A subscriber to every device's events, with a persistent session so that it misses
/// nothing across a broker restart.
pub struct Subscriber {
    pub rx: mpsc::UnboundedReceiver<Received>,
    _task: tokio_util::task::AbortOnDropHandle<()>,
}

impl Subscriber {
    pub async fn connect(broker: &Mosquitto, id: &str) -> Subscriber {
        let mut options = MqttOptions::new(id, broker.host(), broker.port());
        options
            .set_clean_session(false)
            .set_keep_alive(Duration::from_secs(5));
        let (client, mut eventloop) = AsyncClient::new(options, 64);
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, mut ready_rx) = mpsc::channel(1);
        let last_error = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let task_error = last_error.clone();
        let task = tokio::spawn(async move {
            let last_error = task_error;
            loop {
                match eventloop.poll().await {
                    // Subscribing again is harmless (it replaces the subscription and
                    // keeps the session's queue) and covers a first connection that
                    // failed before its SUBACK.
                    Ok(Event::Incoming(Incoming::ConnAck(_))) => {
                        client
                            .subscribe("devices/+/messages/events/#", QoS::AtLeastOnce)
                            .await
                            .expect("subscribe");
                    }
                    Ok(Event::Incoming(Incoming::SubAck(_))) => {
                        let _ = ready_tx.try_send(());
                    }
                    Ok(Event::Incoming(Incoming::Publish(publish))) => {
                        let positions = match telemetry::wire::decode_message(&publish.payload)
                            .expect("the agent publishes valid messages")
                        {
                            Decoded::One(position) => vec![position],
                            Decoded::Batch(batch) => batch
                                .positions
                                .into_iter()
                                .map(|p| p.expect("the agent batches valid positions"))
                                .collect(),
                        };
                        let _ = tx.send(Received {
                            topic: publish.topic.clone(),
                            position: positions.last().expect("a position").clone(),
                            positions,
                            bytes: publish.payload.len(),
                            dup: publish.dup,
                        });
                    }
                    Ok(_) => {}
                    // The broker is down: retry until it is back, paced on the real clock of
                    // the real broker's restart.
                    Err(err) => {
                        *last_error.lock().unwrap() = Some(err.to_string());
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        if tokio::time::timeout(TIMEOUT, ready_rx.recv())
            .await
            .is_err()
        {
            panic!(
                "not subscribed within {TIMEOUT:?}; last error {:?}; broker log:\n{}",
                last_error.lock().unwrap(),
                broker.log()
            );
        }
        Subscriber {
            rx,
            _task: tokio_util::task::AbortOnDropHandle::new(task),
        }
    }

    /// The next message, or a panic after [`TIMEOUT`].
    pub async fn next(&mut self) -> Received {
        tokio::time::timeout(TIMEOUT, self.rx.recv())
            .await
            .expect("a message in time")
            .expect("subscriber running")
    }

    /// Receives until `done` holds for everything received so far.
    pub async fn until(&mut self, mut done: impl FnMut(&[Received]) -> bool) -> Vec<Received> {
        let mut all = Vec::new();
        while !done(&all) {
            all.push(self.next().await);
        }
        all
    }
}

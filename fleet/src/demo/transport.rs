//! The demo's way in: the local IoT Hub (the production topology: devices with SAS tokens
//! over TLS, the writers on the hub's 4-partition Event Hubs endpoint) or an MQTT broker
//! (`--hub mqtt`: plain MQTT, one writer subscribed). Owns starting it, each drone's
//! connection settings, the writer's source, and what was published as the hub or the
//! broker saw it.

use std::path::Path;

use edge_agent::AgentConfig;
use hub_sim::{HubConfig, HubSim};
use serde::Serialize;

use super::DemoError;
use super::observer::{Observer, Published};
use crate::broker::{Broker, BrokerKind};

/// Where the drones publish and the writers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HubKind {
    /// The local IoT Hub (`hub-sim`, in this process): SAS over TLS, its Event Hubs
    /// endpoint with 4 partitions, two writer replicas sharing them.
    #[default]
    Iothub,
    /// An MQTT broker (embedded or Mosquitto): plain MQTT, one writer subscribed.
    Mqtt,
}

/// Partitions of the local hub's Event Hubs endpoint (IoT Hub's default).
pub const HUB_PARTITIONS: usize = 4;

/// The running hub or broker.
pub(super) enum Transport {
    /// The local IoT Hub.
    Hub(Box<HubSim>),
    /// The MQTT broker, and the subscriber that records what the drones published.
    Mqtt(Broker, Option<Observer>),
}

impl Transport {
    /// Starts the hub (its state, CA included, under `work`) or the broker.
    pub(super) async fn start(
        hub: HubKind,
        broker: BrokerKind,
        work: &Path,
    ) -> Result<Transport, DemoError> {
        match hub {
            HubKind::Iothub => {
                let mut config = HubConfig::new(work.join("hub"));
                config.partitions = HUB_PARTITIONS;
                let hub = HubSim::start(config)
                    .await
                    .map_err(|e| DemoError::Hub(e.to_string()))?;
                Ok(Transport::Hub(Box::new(hub)))
            }
            HubKind::Mqtt => {
                let broker = tokio::task::spawn_blocking(move || Broker::start(broker))
                    .await
                    .expect("the broker start does not panic")?;
                Ok(Transport::Mqtt(broker, None))
            }
        }
    }

    /// What the report calls it.
    pub(super) fn name(&self) -> String {
        match self {
            Transport::Hub(_) => format!(
                "local IoT Hub (SAS over TLS; Event Hubs endpoint, {HUB_PARTITIONS} partitions)"
            ),
            Transport::Mqtt(broker, _) => format!("MQTT ({} broker)", broker.kind().name()),
        }
    }

    /// The writer's `WRITER_SOURCE`: the hub's Event Hubs connection string, or the
    /// broker's URL.
    pub(super) fn writer_source(&self) -> String {
        match self {
            Transport::Hub(hub) => hub.eventhub_connection_string(),
            Transport::Mqtt(broker, _) => broker.writer_url(),
        }
    }

    /// The broker, on the MQTT path.
    pub(super) fn broker(&self) -> Option<&Broker> {
        match self {
            Transport::Hub(_) => None,
            Transport::Mqtt(broker, _) => Some(broker),
        }
    }

    /// Starts recording what the drones publish (on the MQTT path a subscriber; the hub
    /// keeps its events anyway).
    pub(super) async fn observe(&mut self) {
        if let Transport::Mqtt(broker, observer) = self {
            *observer = Some(Observer::start(broker).await);
        }
    }

    /// Each drone's newest published position: the hub's accepted events, or what the
    /// subscriber saw.
    pub(super) fn published(&mut self) -> Published {
        match self {
            Transport::Hub(hub) => Published::from_hub(hub),
            Transport::Mqtt(_, observer) => observer.take().map(Observer::stop).unwrap_or_default(),
        }
    }

    /// A drone's agent settings: on the hub, the device registered and its connection
    /// string with the hub's CA trusted (as `IOTHUB_DEVICE_CONNECTION_STRING` and
    /// `IOTHUB_CA_FILE` give them); on the broker, plain MQTT. Its buffer is under `buffer`.
    pub(super) fn agent_config(
        &self,
        device: &str,
        buffer: &Path,
    ) -> Result<AgentConfig, DemoError> {
        let agent = |reason: String| DemoError::AgentSetup {
            device: device.to_owned(),
            reason,
        };
        match self {
            Transport::Hub(hub) => {
                let connection_string = hub.add_device(device).map_err(|e| agent(e.to_string()))?;
                let settings = edge_agent::config::Settings {
                    connection_string: Some(edge_agent::config::Secret::new(connection_string)),
                    iothub_ca_file: Some(hub.config().state_dir.join("ca.pem")),
                    iothub_port: Some(hub.mqtt_addr().port()),
                    position_source: Some("sim".into()),
                    buffer_dir: Some(buffer.to_owned()),
                    ..edge_agent::config::Settings::default()
                };
                settings.resolve().map_err(|e| agent(e.to_string()))
            }
            Transport::Mqtt(broker, _) => Ok(AgentConfig::simulated(
                device,
                &broker.addr().ip().to_string(),
                broker.addr().port(),
                buffer.to_owned(),
            )),
        }
    }

    /// Stops the hub (the broker stops when dropped).
    pub(super) async fn shutdown(self) {
        if let Transport::Hub(hub) = self {
            hub.shutdown().await;
        }
    }
}

//! The demo's way in: the local IoT Hub (the production topology: devices with SAS tokens
//! over TLS, the writers on the hub's 4-partition Event Hubs endpoint) or an MQTT broker
//! (`--hub mqtt`: plain MQTT, one writer subscribed). Owns starting it, onboarding the
//! drones (on the hub: one enrollment group of its provisioning service, every drone
//! registering through it as the agent does), each drone's connection settings, the
//! writer's source, and what was published as the hub or the broker saw it.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use edge_agent::AgentConfig;
use hub_sim::{HubConfig, HubSim};
use serde::Serialize;

use super::DemoError;
use super::observer::{Observer, Published};
use crate::broker::{Broker, BrokerKind};
use crate::onboard::{self, Onboarding, Registrations};

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
/// The enrollment group the demo's fleet registers in.
pub const ENROLLMENT_GROUP: &str = "demo-fleet";
/// The `retry-after` of the hub's provisioning service: short, so that a fleet of a
/// thousand registers in seconds (the service says 3 s; the answer carries whole seconds,
/// so the drones poll again at once).
const DPS_RETRY_AFTER: Duration = Duration::from_millis(100);

/// The running hub or broker.
pub(super) enum Transport {
    /// The local IoT Hub, and the settings of each drone registered through its
    /// provisioning service.
    Hub(Box<HubSim>, HashMap<String, edge_agent::Settings>),
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
                config.dps.retry_after = DPS_RETRY_AFTER;
                let hub = HubSim::start(config)
                    .await
                    .map_err(|e| DemoError::Hub(e.to_string()))?;
                Ok(Transport::Hub(Box::new(hub), HashMap::new()))
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
            Transport::Hub(..) => format!(
                "local IoT Hub (drones onboarded through its DPS; SAS over TLS; Event Hubs endpoint, {HUB_PARTITIONS} partitions)"
            ),
            Transport::Mqtt(broker, _) => format!("MQTT ({} broker)", broker.kind().name()),
        }
    }

    /// The writer's `WRITER_SOURCE`: the hub's Event Hubs connection string, or the
    /// broker's URL.
    pub(super) fn writer_source(&self) -> String {
        match self {
            Transport::Hub(hub, _) => hub.eventhub_connection_string(),
            Transport::Mqtt(broker, _) => broker.writer_url(),
        }
    }

    /// The broker, on the MQTT path.
    /// The local IoT Hub, when the drones publish to it.
    pub(super) fn hub(&self) -> Option<&HubSim> {
        match self {
            Transport::Hub(hub, _) => Some(hub),
            Transport::Mqtt(..) => None,
        }
    }

    pub(super) fn broker(&self) -> Option<&Broker> {
        match self {
            Transport::Hub(..) => None,
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
            Transport::Hub(hub, _) => Published::from_hub(hub),
            Transport::Mqtt(_, observer) => observer.take().map(Observer::stop).unwrap_or_default(),
        }
    }

    /// Onboards `devices` on the hub: enrolls one symmetric-key group in its provisioning
    /// service and registers every drone in it with its derived key
    /// ([`onboard::register_fleet`]), counting in `registrations`. Returns the tally with
    /// the service's own count; `None` on the broker (nothing to onboard).
    pub(super) async fn onboard(
        &mut self,
        devices: &[String],
        registrations: &Registrations,
    ) -> Result<Option<Onboarding>, DemoError> {
        let Transport::Hub(hub, provisioned) = self else {
            return Ok(None);
        };
        let group_key = hub
            .add_symmetric_key_group(ENROLLMENT_GROUP)
            .map_err(|e| DemoError::Hub(e.to_string()))?;
        let group = edge_agent::Settings {
            dps_id_scope: Some(hub.id_scope().to_owned()),
            dps_endpoint: Some(format!("{}:{}", hub.config().host, hub.dps_addr().port())),
            dps_group_key: Some(edge_agent::Secret::new(group_key)),
            // A demo: every simulated drone derives its key from the group's.
            dps_group_key_on_device: Some(true),
            dps_allowed_hub_suffix: Some(hub.config().host.clone()),
            iothub_ca_file: Some(hub.config().state_dir.join("ca.pem")),
            ..edge_agent::Settings::default()
        };
        let settings = onboard::register_fleet(&group, devices, registrations).await;
        for (device, settings) in devices.iter().zip(settings) {
            if let Some(settings) = settings {
                provisioned.insert(device.clone(), settings);
            }
        }
        Ok(Some(Onboarding {
            totals: registrations.totals(),
            assigned_by_dps: hub.stats().registrations_assigned,
        }))
    }

    /// A drone's agent settings: on the hub, the settings its registration gave (the
    /// assigned hub's connection string with the hub's CA trusted, as the agent runs once
    /// provisioned), `None` for a drone that did not register; on the broker, plain MQTT.
    /// Its buffer is under `buffer`.
    pub(super) fn agent_config(
        &self,
        device: &str,
        buffer: &Path,
    ) -> Result<Option<AgentConfig>, DemoError> {
        match self {
            Transport::Hub(hub, provisioned) => {
                let Some(settings) = provisioned.get(device) else {
                    return Ok(None);
                };
                let settings = edge_agent::Settings {
                    iothub_port: Some(hub.mqtt_addr().port()),
                    position_source: Some("sim".into()),
                    buffer_dir: Some(buffer.to_owned()),
                    ..settings.clone()
                };
                settings
                    .resolve()
                    .map(Some)
                    .map_err(|e| DemoError::AgentSetup {
                        device: device.to_owned(),
                        reason: e.to_string(),
                    })
            }
            Transport::Mqtt(broker, _) => Ok(Some(AgentConfig::simulated(
                device,
                &broker.addr().ip().to_string(),
                broker.addr().port(),
                buffer.to_owned(),
            ))),
        }
    }

    /// Stops the hub (the broker stops when dropped).
    pub(super) async fn shutdown(self) {
        if let Transport::Hub(hub, _) = self {
            hub.shutdown().await;
        }
    }
}

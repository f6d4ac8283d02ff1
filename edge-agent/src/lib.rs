//! The edge agent of a drone: reads the position (MAVLink, gpsd or a simulator), makes a
//! wire message every interval, keeps it on disk until the broker acknowledged it, and
//! publishes it over MQTT in Azure IoT Hub's device dialect (or to a plain MQTT broker).
//!
//! ```text
//! source/ (mavlink, gpsd, sim) -> agent (interval, seq) -> buffer/ (disk) -> batch (PUBLISH_EVERY) -> transport/ (MQTT)
//!                                    ^                                                            |
//!                                    +---- twin/ (desired settings, reported state, methods) <----+ (IoT Hub only)
//! ```
//!
//! On IoT Hub each agent follows its device twin by itself: a desired `reportInterval` or
//! `publishEvery` set on the hub's service side takes effect in the running agent and shows
//! in [`AgentStatus::settings`]; the direct methods `reportNow` and `status` are answered.
//!
//! The library has no global state and handles no signals: a process can run many
//! agents (a simulated fleet), each stopped by its own [`CancellationToken`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), edge_agent::AgentError> {
//! use edge_agent::{Agent, AgentConfig};
//! use tokio_util::sync::CancellationToken;
//!
//! let config = AgentConfig::simulated("drone-0001", "127.0.0.1", 1883, "/tmp/drone-0001".into());
//! let agent = Agent::new(config)?;
//! let handle = agent.handle();
//! let shutdown = CancellationToken::new();
//! let running = tokio::spawn(agent.run(shutdown.clone()));
//! println!("{:?}", handle.status());
//! shutdown.cancel();
//! # let _ = running.await;
//! # Ok(())
//! # }
//! ```

mod agent;
mod atomic_file;
mod batch;
mod buffer;
mod cadence;
mod clock;
mod config;
mod provision;
mod source;
mod status;
mod transport;
mod twin;

pub use agent::DEFAULT_CLOCK_MAX_SKEW;
pub use agent::{Agent, AgentConfig, AgentError, AgentReport};
pub use buffer::BufferConfig;
pub use buffer::record::scan as scan_records;
pub use buffer::{DiskBuffer, Record};
pub use cadence::RemoteConfig;
pub use clock::{Clock, kernel_synchronised};
pub use config::{
    CONNECTION_STRING, DPS_DEVICE_KEY, DPS_GROUP_KEY, DurationSetting, MQTT_PASSWORD, Secret,
    Settings, env_names,
};
pub use provision::{
    DPS_PORT, DpsConfig, DpsCredential, FleetCa, GLOBAL_ENDPOINT, HubSuffix, MAX_RETRY_AFTER,
    RegisterError, assignment as dps_assignment, derive_device_key, forget as forget_assignment,
    register, save as save_assignment,
};
pub use source::{FixTime, MavlinkAddress, MavlinkConfig, Source};
pub use source::{SimConfig, SimRoute, SourceConfig};
pub use status::MavlinkStatus;
pub use status::{AgentHandle, AgentStatus, ConnectionState, SettingsStatus, SourceKind};
pub use tokio_util::sync::CancellationToken;
pub use transport::sas::{DeviceConnectionString, resource_uri, sas_token};
pub use transport::{Auth, Endpoint, SasConfig, TransportConfig, X509Config};
pub use transport::{ConnectionEnd, Dialer, event_topic};
pub use twin::DEFAULT_REPORTED_MIN_INTERVAL;

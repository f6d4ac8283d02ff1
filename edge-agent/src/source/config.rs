//! Where the agent's positions come from, as the agent runs it.

use super::gpsd::GpsdAddress;
use super::mavlink::MavlinkConfig;
use super::sim::SimConfig;
use crate::status::SourceKind;

/// Where positions come from (`POSITION_SOURCE`).
#[derive(Debug, Clone, PartialEq)]
pub enum SourceConfig {
    /// MAVLink from the flight stack.
    Mavlink(MavlinkConfig),
    /// gpsd `TPV` reports over TCP.
    Gpsd {
        /// Where gpsd listens, usually `127.0.0.1:2947`.
        address: GpsdAddress,
    },
    /// A simulated drone flying a route.
    Sim(SimConfig),
}

impl SourceConfig {
    /// The kind of source this is, as the status reports it.
    pub fn kind(&self) -> SourceKind {
        match self {
            SourceConfig::Mavlink(_) => SourceKind::Mavlink,
            SourceConfig::Gpsd { .. } => SourceKind::Gpsd,
            SourceConfig::Sim(_) => SourceKind::Sim,
        }
    }
}

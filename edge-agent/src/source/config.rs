//! Where the agent's positions come from, as the agent runs it.

use super::gpsd::GpsdAddress;
use super::mavlink::MavlinkConfig;
use super::sim::SimConfig;

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

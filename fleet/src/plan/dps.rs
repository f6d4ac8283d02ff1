//! The Device Provisioning Service: the instances a fleet needs, and how long the whole fleet
//! takes to come back after a mass reset. A drone that kept its assignment
//! (`assignment.json`, edge-agent's `provision` module) connects straight to its hub, held
//! only by the hubs' new-connection throttle; one that lost it registers again first, held by
//! DPS's registration rate.

use serde::Serialize;

use super::limits::Limits;

/// DPS for the fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DpsPlan {
    /// Instances (each holds a share of the fleet's registrations and links its hubs).
    pub instances: u64,
    /// Registrations a minute, all instances.
    pub registrations_per_minute: f64,
    /// Seconds until every drone is connected when every drone registers again.
    pub onboarding_secs: f64,
    /// Seconds until every drone is connected when drones keep their assignment.
    pub reconnect_secs: f64,
    /// New device connections a second the hubs take, all hubs.
    pub connections_per_sec: f64,
}

/// DPS for `drones` over `hubs` hubs that take `connections_per_sec` new connections a
/// second in all.
pub fn plan(drones: u64, hubs: u64, connections_per_sec: f64, limits: &Limits) -> DpsPlan {
    let dps = &limits.dps;
    let instances = drones
        .div_ceil(dps.max_registrations)
        .max(hubs.div_ceil(dps.max_linked_hubs))
        .max(1);
    let registrations_per_minute = instances as f64 * dps.registrations_per_minute;
    let reconnect_secs = drones as f64 / connections_per_sec;
    let registering_secs = drones as f64 / registrations_per_minute * 60.0;
    DpsPlan {
        instances,
        registrations_per_minute,
        onboarding_secs: registering_secs.max(reconnect_secs),
        reconnect_secs,
        connections_per_sec,
    }
}

/// A duration as the plan prints it, in its two largest units: `7 d`, `16 h 40 min`,
/// `5 min`, `9 s`.
pub fn duration_text(secs: f64) -> String {
    let secs = secs.ceil() as u64;
    let units = [(86_400, "d"), (3_600, "h"), (60, "min"), (1, "s")];
    let Some(first) = units.iter().position(|(size, _)| secs >= *size) else {
        return "0 s".into();
    };
    let (size, name) = units[first];
    let mut text = format!("{} {name}", secs / size);
    if let Some((next, next_name)) = units.get(first + 1) {
        let rest = secs % size / next;
        if rest > 0 {
            text.push_str(&format!(" {rest} {next_name}"));
        }
    }
    text
}

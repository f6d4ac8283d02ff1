//! The Device Provisioning Service (DPS) of the local hub: zero-touch provisioning over MQTT
//! 3.1.1 on TLS, as the service behaves for Microsoft's device SDKs.
//!
//! A registering device connects to the same listeners as devices do (the device MQTT port,
//! WebSockets, and `--dps-port` when given): its CONNECT's user name,
//! `{idScope}/registrations/{registrationId}/api-version=2019-03-31`, tells it from a device,
//! so SDKs that only dial 8883 reach both. It attests with a SAS token for
//! `{idScope}/registrations/{registrationId}` (`skn=registration`) or with an X.509 chain
//! ([`attestation`]), against the enrollments ([`enrollment`]); registers; and polls its
//! operation until it is `assigned` to a linked hub ([`allocation`]), where the service has
//! created the device with the credentials it attested with. [`protocol`] holds the topics
//! and error codes, `session` the connection, `service` the decisions and what is kept.
//!
//! One hub process plays one DPS, whose ID scope, enrollments and registrations live in its
//! state directory (`dps-id-scope`, `enrollments.json`, `dps-registrations.json`). Its own
//! hub is linked from the start; further hubs running in the same process are linked with
//! [`crate::HubSim::link_hub`], and the DPS then creates devices directly in their registries
//! and names their host names as `assignedHub` (so linked hubs need distinct host names).
//! Hubs in other processes are not linked: a DPS in front of several hubs is a test or demo
//! fixture, and one process keeps it small.

pub mod allocation;
pub mod attestation;
pub mod enrollment;
pub mod protocol;
pub(crate) mod service;
pub(crate) mod session;

pub use allocation::Allocation;
pub use enrollment::{Attestation, EnrollmentId};
pub use service::DpsError;

use std::time::Duration;

/// Settings of the provisioning service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpsConfig {
    /// A listener of its own (0: any free port); `None`: registrations reach the device
    /// listeners only.
    pub port: Option<u16>,
    /// How new registrations are spread over the linked hubs.
    pub allocation: Allocation,
    /// The `retry-after` of a 202 answer (the service says 3 s).
    pub retry_after: Duration,
    /// How many status polls are answered `assigning` before `assigned`.
    pub assigning_polls: u32,
}

impl Default for DpsConfig {
    fn default() -> Self {
        DpsConfig {
            port: None,
            allocation: Allocation::default(),
            retry_after: Duration::from_secs(3),
            assigning_polls: 1,
        }
    }
}

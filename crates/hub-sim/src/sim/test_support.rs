//! The calls only tests make (cargo feature `test-support`): devices, enrollments and linked
//! hubs set up directly, twins and direct methods from the service side, role assignments,
//! the AMQP side stopped and started, and fault switches.

use super::{HubError, HubSim};
use crate::amqp::entra::EventHubsRole;
use crate::dps::service::Registration;
use crate::dps::{DpsError, EnrollmentId};
use crate::hub::twin::methods::{self, MethodError, MethodResponse, MethodTimeouts};
use crate::hub::twin::store::TwinError;
use crate::state_dir::{self, PolicyKeys};
use crate::tls::Ca;

impl HubSim {
    /// Device `device`'s twin as the service reads it (`GET /twins/{id}`), if it is registered.
    pub fn twin(&self, device: &str) -> Option<serde_json::Value> {
        crate::hub::twin::service_view(&self.hub, device)
    }

    /// Patches `device`'s desired properties (a JSON merge patch: null removes) as
    /// `PATCH /twins/{id}` does; the device is told if it subscribed, and the change is
    /// routed when twin change events are. Returns the new desired `$version`.
    pub fn update_desired(
        &self,
        device: &str,
        patch: &serde_json::Value,
    ) -> Result<u64, TwinError> {
        let patch = patch.as_object().ok_or(TwinError::NotAnObject)?;
        let change = crate::hub::twin::update(&self.hub, device, Some(patch), None, None, false)?;
        Ok(change.desired_version)
    }

    /// Invokes direct method `name` on `device` as `POST /twins/{id}/methods` does.
    pub async fn invoke_method(
        &self,
        device: &str,
        name: &str,
        payload: &serde_json::Value,
        timeouts: MethodTimeouts,
    ) -> Result<MethodResponse, MethodError> {
        methods::invoke(&self.hub, device, name, payload, timeouts).await
    }

    /// The built-in endpoint's connection string over TLS (`service` policy, the service's
    /// form: no `UseDevelopmentEmulator`), if a TLS port was asked for.
    pub fn eventhub_tls_connection_string(&self) -> Option<String> {
        let port = self.amqp.tls_addr()?.port();
        Some(state_dir::eventhub_tls_connection_string(
            &self.config.host,
            port,
            &self.keys.service,
            &self.config.hub_name,
        ))
    }

    /// Stops the AMQP side: the listeners close and every AMQP connection drops.
    pub fn stop_amqp(&self) {
        self.amqp.stop();
    }

    /// Starts the AMQP side again on the same ports.
    pub async fn restart_amqp(&self) -> Result<(), HubError> {
        let addr = self.amqp.addr();
        self.amqp
            .restart()
            .await
            .map_err(|source| HubError::Bind { addr, source })
    }

    /// The CA, to issue client certificates for X.509 devices in tests.
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// Assigns principal `oid` the Event Hubs data role `role` at run time (`None` removes
    /// its assignment), as `az role assignment create` and `delete` do.
    pub fn assign_role(&self, oid: &str, role: Option<EventHubsRole>) -> Result<(), HubError> {
        self.entra
            .as_ref()
            .ok_or(HubError::NoEntraTrust)?
            .assign(oid, role);
        Ok(())
    }

    /// The policy keys.
    pub fn policy_keys(&self) -> &PolicyKeys {
        &self.keys
    }

    /// Registers a SAS device (or finds it) and returns its connection string.
    pub fn add_device(&self, id: &str) -> Result<String, HubError> {
        let key = self.hub.registry.add_sas(id)?;
        Ok(state_dir::device_connection_string(
            &self.config.host,
            id,
            &key,
        ))
    }

    /// Deletes device `id` from the registry and closes the device connections (the others
    /// reconnect), as deleting a device in IoT Hub ends its connection; whether it existed.
    pub fn remove_device(&self, id: &str) -> Result<bool, HubError> {
        let removed = self.hub.registry.remove(id)?;
        if removed {
            self.hub.twins.remove(id)?;
            self.hub.faults.drop_device_connections();
        }
        Ok(removed)
    }

    /// Registers an X.509 device by its certificate's SHA-256 thumbprint.
    pub fn add_x509_device(&self, id: &str, thumbprint: &str) -> Result<(), HubError> {
        Ok(self.hub.registry.add_x509(id, thumbprint)?)
    }

    /// Enables or disables an enrollment.
    pub fn set_enrollment_enabled(&self, id: &EnrollmentId, enabled: bool) -> Result<(), HubError> {
        Ok(self
            .dps
            .enrollments
            .set_enabled(id, enabled)
            .map_err(DpsError::from)?)
    }

    /// Links `other` (a hub of this process, with another host name) to this hub's
    /// provisioning service: registrations are then spread over both by the allocation policy.
    pub fn link_hub(&self, other: &HubSim) -> Result<(), HubError> {
        Ok(self.dps.link(other.hub.clone())?)
    }

    /// The host names of the hubs linked to this hub's provisioning service (its own first).
    pub fn linked_hubs(&self) -> Vec<String> {
        self.dps.linked_hosts()
    }

    /// The devices the provisioning service has assigned.
    pub fn dps_registrations(&self) -> Vec<Registration> {
        self.dps.registrations()
    }

    /// Devices connected now.
    pub fn connected_devices(&self) -> usize {
        self.hub.sessions.count()
    }

    /// Closes every device connection now.
    pub fn drop_device_connections(&self) {
        self.hub.faults.drop_device_connections();
    }

    /// Stalls every partition receiver attached so far: it stays attached, delivers nothing
    /// more and answers no detach (receivers attached later deliver).
    pub fn stall_receivers(&self) {
        self.hub.faults.stall_receivers();
    }

    /// Delays each `$management` answer of the Event Hubs endpoint by `delay` (zero: none).
    pub fn delay_management_answers(&self, delay: std::time::Duration) {
        let settings = self.hub.faults.settings();
        self.hub.faults.update(crate::faults::FaultSettings {
            management_delay_ms: delay.as_millis() as u64,
            ..settings
        });
    }
}

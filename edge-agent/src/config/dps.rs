//! The settings of onboarding through the Device Provisioning Service: which credential a
//! drone registers with, its registration id, and the settings a provisioned drone runs with.

use std::path::Path;

use super::{ConfigError, DPS_DEVICE_KEY, DPS_GROUP_KEY, Settings, invalid};
use crate::provision::{
    Assignment, Attestation, DPS_PORT, DpsConfig, DpsCredential, GLOBAL_ENDPOINT, HubSuffix,
    check_registration_id,
};

impl Settings {
    /// The onboarding through DPS, when `DPS_ID_SCOPE` is set; the DPS settings without it
    /// are refused, as is a connection string or broker beside it.
    pub fn dps(&self) -> Result<Option<DpsConfig>, ConfigError> {
        let Some(id_scope) = &self.dps_id_scope else {
            let without_scope = [
                ("DPS_REGISTRATION_ID", self.dps_registration_id.is_some()),
                ("DPS_ENDPOINT", self.dps_endpoint.is_some()),
                (DPS_GROUP_KEY, self.dps_group_key.is_some()),
                (DPS_DEVICE_KEY, self.dps_device_key.is_some()),
                ("DPS_CERT_FILE", self.dps_cert_file.is_some()),
                ("DPS_KEY_FILE", self.dps_key_file.is_some()),
                (
                    "DPS_GROUP_KEY_ON_DEVICE",
                    self.dps_group_key_on_device.is_some(),
                ),
                (
                    "DPS_ALLOWED_HUB_SUFFIX",
                    self.dps_allowed_hub_suffix.is_some(),
                ),
            ];
            return match without_scope.iter().find(|(_, set)| *set) {
                Some((setting, _)) => Err(invalid(
                    setting,
                    "it is a setting of onboarding through DPS: set DPS_ID_SCOPE too, or remove it",
                )),
                None => Ok(None),
            };
        };
        if self.connection_string.is_some() || self.mqtt_url.is_some() {
            return Err(invalid(
                "DPS_ID_SCOPE",
                "DPS assigns the hub and the device id: remove IOTHUB_DEVICE_CONNECTION_STRING and MQTT_URL, or DPS_ID_SCOPE",
            ));
        }
        if self.x509_cert_file.is_some() || self.x509_key_file.is_some() {
            return Err(invalid(
                "X509_CERT_FILE",
                "onboarding through DPS takes its certificate as DPS_CERT_FILE and DPS_KEY_FILE (used for the hub too)",
            ));
        }
        let certificate = match (&self.dps_cert_file, &self.dps_key_file) {
            (Some(cert_path), Some(key_path)) => {
                for (setting, path) in [("DPS_CERT_FILE", cert_path), ("DPS_KEY_FILE", key_path)] {
                    if !path.is_file() {
                        return Err(invalid(
                            setting,
                            format!("{} is not a readable file", path.display()),
                        ));
                    }
                }
                Some(client_tls::Identity {
                    cert_path: cert_path.clone(),
                    key_path: key_path.clone(),
                })
            }
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(invalid(
                    "DPS_CERT_FILE",
                    "X.509 attestation needs both DPS_CERT_FILE and DPS_KEY_FILE",
                ));
            }
        };
        let group_key_on_device = self.dps_group_key_on_device == Some(true);
        if self.dps_group_key_on_device.is_some() && self.dps_group_key.is_none() {
            return Err(invalid(
                "DPS_GROUP_KEY_ON_DEVICE",
                "it allows DPS_GROUP_KEY, which is not set: remove it",
            ));
        }
        let credential = match (&self.dps_group_key, &self.dps_device_key, certificate) {
            (Some(_), None, None) if !group_key_on_device => {
                return Err(invalid(DPS_GROUP_KEY, GROUP_KEY_REFUSED));
            }
            (Some(group), None, None) => DpsCredential::Group(group.clone()),
            (None, Some(device), None) => DpsCredential::Device(device.clone()),
            (None, None, Some(identity)) => DpsCredential::Certificate(identity),
            (None, None, None) => {
                return Err(ConfigError::Missing {
                    setting: DPS_DEVICE_KEY,
                    hint: "the drone's own key (`edge-agent derive-key` prints it), in the environment or in the file DPS_DEVICE_KEY_FILE names; or its X.509 certificate as DPS_CERT_FILE and DPS_KEY_FILE",
                });
            }
            _ => {
                return Err(invalid(
                    DPS_DEVICE_KEY,
                    "set one of DPS_GROUP_KEY (the enrollment group's key), DPS_DEVICE_KEY (the drone's own) or DPS_CERT_FILE with DPS_KEY_FILE (its certificate)",
                ));
            }
        };
        let registration_id = match &self.dps_registration_id {
            Some(id) => id.clone(),
            None => registration_id_of_machine(Path::new(MACHINE_ID))
                .map_err(|problem| invalid("DPS_REGISTRATION_ID", problem))?,
        };
        check_registration_id(&registration_id)
            .map_err(|problem| invalid("DPS_REGISTRATION_ID", problem))?;
        let endpoint = self.dps_endpoint.as_deref().unwrap_or(GLOBAL_ENDPOINT);
        let (host, port) = match endpoint.rsplit_once(':') {
            Some((host, port)) => (
                host,
                port.parse().map_err(|_| {
                    invalid(
                        "DPS_ENDPOINT",
                        format!("`{port}` is not a port: write `host` or `host:port`"),
                    )
                })?,
            ),
            None => (endpoint, DPS_PORT),
        };
        if host.is_empty() || host.contains('/') {
            return Err(invalid(
                "DPS_ENDPOINT",
                "write `host` or `host:port`, e.g. global.azure-devices-provisioning.net",
            ));
        }
        let allowed_hubs = match &self.dps_allowed_hub_suffix {
            Some(suffix) => HubSuffix::new(suffix)
                .map_err(|problem| invalid("DPS_ALLOWED_HUB_SUFFIX", problem))?,
            None => HubSuffix::default(),
        };
        Ok(Some(DpsConfig {
            id_scope: id_scope.clone(),
            registration_id,
            credential,
            host: host.to_owned(),
            port,
            ca_file: self.iothub_ca_file.clone(),
            allowed_hubs,
        }))
    }

    /// The settings with the connection string of `assignment` for `attestation` (and its
    /// certificate for the hub), as a provisioned drone runs.
    pub fn provisioned(self, assignment: &Assignment, attestation: &Attestation) -> Settings {
        let (x509_cert_file, x509_key_file) = match attestation {
            Attestation::X509(identity) => (
                Some(identity.cert_path.clone()),
                Some(identity.key_path.clone()),
            ),
            Attestation::SymmetricKey(_) => (None, None),
        };
        Settings {
            connection_string: Some(assignment.connection_string(attestation)),
            x509_cert_file,
            x509_key_file,
            dps_id_scope: None,
            dps_registration_id: None,
            dps_endpoint: None,
            dps_group_key: None,
            dps_device_key: None,
            dps_cert_file: None,
            dps_key_file: None,
            dps_group_key_on_device: None,
            dps_allowed_hub_suffix: None,
            ..self
        }
    }
}

/// Why the group key is refused on a drone, and what to give it instead.
const GROUP_KEY_REFUSED: &str = "the enrollment group's key must not be on a drone: whoever reads it can derive every drone's key. \
Give the drone its own credential instead: DPS_DEVICE_KEY (its derived key, printed by `edge-agent derive-key`) \
or an X.509 certificate of the fleet's CA (DPS_CERT_FILE and DPS_KEY_FILE, issued by `fleet-certs`). \
Labs and demos only: DPS_GROUP_KEY_ON_DEVICE=true";

/// Where the machine's id is (systemd's).
const MACHINE_ID: &str = "/etc/machine-id";

/// `drone-` and 16 hex digits of HMAC-SHA256 keyed with the machine id over the agent's
/// name: stable for the board, and not the machine id itself, which machine-id(5) asks
/// applications not to expose.
pub(super) fn registration_id_of_machine(path: &Path) -> Result<String, String> {
    use hmac::{Hmac, Mac};
    let id = std::fs::read_to_string(path).map_err(|err| {
        format!(
            "no registration id given and {} cannot be read ({err}): set DPS_REGISTRATION_ID",
            path.display()
        )
    })?;
    let id = id.trim();
    if id.is_empty() {
        return Err(format!(
            "no registration id given and {} is empty: set DPS_REGISTRATION_ID",
            path.display()
        ));
    }
    let mut mac =
        Hmac::<sha2::Sha256>::new_from_slice(id.as_bytes()).expect("HMAC takes any key length");
    mac.update(b"edge-agent DPS registration id");
    let digest = mac.finalize().into_bytes();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("drone-{hex}"))
}

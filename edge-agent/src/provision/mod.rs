//! Zero-touch onboarding through the Device Provisioning Service (DPS): which hub and device
//! id this drone has, found once by registering and kept beside the buffer.
//!
//! A drone's image carries the ID scope and a credential of its own: its key (derived from
//! the enrollment group's where the image is personalised: [`derive_device_key`]) or a
//! certificate of the fleet's CA whose common name is the registration id ([`FleetCa`]).
//! The group's key itself goes on a drone only in labs and demos. At the first start the
//! agent registers ([`register`]) and keeps the assignment in `assignment.json` (hub and
//! device id, no key: the key is derived again at every start) with owner-only permissions;
//! later starts reuse it without registering.

mod certs;
mod register;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use settings::Secret;
use sha2::Sha256;

pub use certs::FleetCa;
pub use register::{MAX_RETRY_AFTER, RegisterError, register};

/// The public DPS endpoint.
pub const GLOBAL_ENDPOINT: &str = "global.azure-devices-provisioning.net";
/// DPS's MQTT port.
pub const DPS_PORT: u16 = 8883;
/// The assignment's file in the state directory.
pub const ASSIGNMENT_FILE: &str = "assignment.json";

/// What a drone proves itself with, as configured.
#[derive(Debug, Clone)]
pub enum DpsCredential {
    /// The enrollment group's primary key (`DPS_GROUP_KEY`).
    Group(Secret),
    /// The drone's own key (`DPS_DEVICE_KEY`): an individual enrollment's, or one derived
    /// by `edge-agent derive-key`.
    Device(Secret),
    /// A certificate chain and key (`DPS_CERT_FILE`, `DPS_KEY_FILE`): X.509 attestation,
    /// used for the hub too.
    Certificate(client_tls::Identity),
}

/// What a registration presents: a SAS token signed with the drone's key, or its
/// certificate in TLS.
#[derive(Debug, Clone)]
pub enum Attestation {
    /// The drone's key, base64.
    SymmetricKey(Secret),
    /// The drone's certificate and key.
    X509(client_tls::Identity),
}

/// How to register.
#[derive(Debug, Clone)]
pub struct DpsConfig {
    /// The DPS instance's ID scope (`DPS_ID_SCOPE`).
    pub id_scope: String,
    /// This drone's registration id (`DPS_REGISTRATION_ID`).
    pub registration_id: String,
    /// Its credential.
    pub credential: DpsCredential,
    /// The DPS host.
    pub host: String,
    /// Its MQTT port.
    pub port: u16,
    /// The CA to trust instead of the system's roots (`IOTHUB_CA_FILE`).
    pub ca_file: Option<PathBuf>,
    /// The hubs DPS may assign (`DPS_ALLOWED_HUB_SUFFIX`).
    pub allowed_hubs: HubSuffix,
}

/// The host names of the hubs DPS may assign this drone: a domain suffix with its leading
/// dot (`.azure-devices.net`: any hub of the public cloud), or one host name and its
/// subdomains (`localhost`, a local hub). A hub outside it is refused: its name becomes
/// the connection's host, and the drone would send its positions and its credentials there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSuffix(String);

impl HubSuffix {
    /// The public cloud's hubs.
    pub const AZURE: &str = ".azure-devices.net";

    /// `text` as a suffix: letters, digits, `-` and `.`, case-insensitive.
    pub fn new(text: &str) -> Result<HubSuffix, String> {
        let suffix = text.trim().to_ascii_lowercase();
        let labels = suffix.strip_prefix('.').unwrap_or(&suffix);
        if labels.is_empty() || !is_host_name(labels) {
            return Err(format!(
                "`{text}` is not a host name or a domain suffix: write e.g. {} or localhost",
                HubSuffix::AZURE
            ));
        }
        Ok(HubSuffix(suffix))
    }

    /// Whether the hub `host` is inside: under the suffix, or the host name itself or
    /// one of its subdomains.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        if !is_host_name(&host) {
            return false;
        }
        match self.0.strip_prefix('.') {
            Some(_) => host.len() > self.0.len() && host.ends_with(&self.0),
            None => host == self.0 || host.ends_with(&format!(".{}", self.0)),
        }
    }
}

impl Default for HubSuffix {
    fn default() -> Self {
        HubSuffix(HubSuffix::AZURE.to_owned())
    }
}

impl std::fmt::Display for HubSuffix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Dot-separated labels of letters, digits and `-`, none empty.
fn is_host_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl DpsConfig {
    /// What the drone presents: its key (derived from the group's when that is what was
    /// given), or its certificate.
    pub fn attestation(&self) -> Result<Attestation, KeyError> {
        Ok(match &self.credential {
            DpsCredential::Group(group) => Attestation::SymmetricKey(Secret::new(
                derive_device_key(group.expose(), &self.registration_id)?,
            )),
            DpsCredential::Device(key) => {
                Attestation::SymmetricKey(Secret::new(key.expose().trim()))
            }
            DpsCredential::Certificate(identity) => Attestation::X509(identity.clone()),
        })
    }
}

/// A key that is not base64.
#[derive(Debug, thiserror::Error)]
#[error("the key is not base64: {0}")]
pub struct KeyError(#[from] base64::DecodeError);

/// A drone's key from its enrollment group's: base64(HMAC-SHA256(group key, registration
/// id)), as DPS derives it for symmetric-key groups.
pub fn derive_device_key(group_key: &str, registration_id: &str) -> Result<String, KeyError> {
    let key = BASE64.decode(group_key.trim())?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(registration_id.as_bytes());
    Ok(BASE64.encode(mac.finalize().into_bytes()))
}

/// DPS's rules for a registration id: 1 to 128 characters, lower-case letters, digits and
/// `-` `.` `_` `:`.
pub fn check_registration_id(id: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-._:".contains(c);
    if id.is_empty() || id.len() > 128 || !id.chars().all(allowed) {
        return Err(format!(
            "`{id}` is not a registration id: 1 to 128 lower-case letters, digits and - . _ :"
        ));
    }
    Ok(())
}

/// The hub and device id DPS assigned this drone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Assignment {
    /// The ID scope it was assigned under.
    pub id_scope: String,
    /// The registration id it registered with.
    pub registration_id: String,
    /// The hub's host name.
    pub assigned_hub: String,
    /// The device id on that hub.
    pub device_id: String,
}

impl Assignment {
    /// The device connection string of the assignment for `attestation`: with the key, or
    /// `x509=true` for a certificate.
    pub fn connection_string(&self, attestation: &Attestation) -> Secret {
        let credential = match attestation {
            Attestation::SymmetricKey(key) => format!("SharedAccessKey={}", key.expose()),
            Attestation::X509(_) => "x509=true".to_owned(),
        };
        Secret::new(format!(
            "HostName={};DeviceId={};{credential}",
            self.assigned_hub, self.device_id
        ))
    }
}

/// Why the assignment could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file could not be read, written or protected.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not what the agent writes.
    #[error("{path} is not an assignment the agent wrote ({source}): remove it to register again")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
}

/// The assignment kept in `dir` for `config`'s ID scope and registration id, if any.
pub fn load(dir: &Path, config: &DpsConfig) -> Result<Option<Assignment>, StateError> {
    let path = dir.join(ASSIGNMENT_FILE);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StateError::Io { path, source }),
    };
    let assignment: Assignment =
        serde_json::from_slice(&text).map_err(|source| StateError::Corrupt { path, source })?;
    let same = assignment.id_scope == config.id_scope
        && assignment.registration_id == config.registration_id;
    Ok(same.then_some(assignment))
}

/// Keeps `assignment` in `dir`, readable by the owner only, replacing any earlier one
/// whole (written to a temporary file, synced, renamed).
pub fn save(dir: &Path, assignment: &Assignment) -> Result<(), StateError> {
    let path = dir.join(ASSIGNMENT_FILE);
    let io = |source| StateError::Io {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let text = serde_json::to_vec_pretty(assignment).expect("an assignment serializes");
    crate::atomic_file::replace(&path, &text).map_err(io)
}

/// Forgets the assignment kept in `dir` (its hub refuses the credentials): the next start
/// registers again.
pub fn forget(dir: &Path) -> Result<(), StateError> {
    let path = dir.join(ASSIGNMENT_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StateError::Io { path, source }),
    }
}

/// The assignment: the one kept in `dir`, or a new registration, tried again with
/// `backoff` (and at least DPS's `retry-after`, itself capped) until one is assigned; every
/// refusal is logged with what DPS said.
pub async fn assignment(
    config: &DpsConfig,
    dir: &Path,
    backoff: retry_backoff::BackoffConfig,
) -> anyhow::Result<Assignment> {
    if let Some(kept) = load(dir, config)? {
        tracing::info!(
            hub = kept.assigned_hub,
            device_id = kept.device_id,
            "using the kept DPS assignment"
        );
        return Ok(kept);
    }
    let attestation = config.attestation()?;
    let mut backoff = retry_backoff::Backoff::new(backoff);
    loop {
        match register(config, &attestation).await {
            Ok(assignment) => {
                save(dir, &assignment)?;
                tracing::info!(
                    hub = assignment.assigned_hub,
                    device_id = assignment.device_id,
                    "registered with DPS"
                );
                return Ok(assignment);
            }
            Err(err) => {
                // DPS's wait (at most register::MAX_RETRY_AFTER) is the least one.
                let delay = backoff
                    .next_delay()
                    .max(err.retry_after().unwrap_or_default());
                tracing::error!(error = %err, retry_in = ?delay, "DPS registration failed");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// How long to wait for each answer of DPS.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir_scope: &str) -> DpsConfig {
        DpsConfig {
            id_scope: dir_scope.into(),
            registration_id: "drone-7".into(),
            credential: DpsCredential::Device(Secret::new("AAEC")),
            host: "localhost".into(),
            port: DPS_PORT,
            ca_file: None,
            allowed_hubs: HubSuffix::default(),
        }
    }

    #[test]
    fn only_hubs_under_the_allowed_suffix_are_taken() {
        let azure = HubSuffix::default();
        assert!(azure.allows("fleet-hub.azure-devices.net"));
        assert!(azure.allows("Fleet-Hub.Azure-Devices.NET"));
        for hostile in [
            "azure-devices.net",
            "evil-azure-devices.net",
            "hub.azure-devices.net.evil.example",
            "evil.example;SharedAccessKey=x.azure-devices.net",
            "hub.azure-devices.net/",
            "",
        ] {
            assert!(!azure.allows(hostile), "{hostile}");
        }
        let local = HubSuffix::new("localhost").unwrap();
        assert!(local.allows("localhost"));
        assert!(!local.allows("evillocalhost"));
        assert!(!local.allows("fleet-hub.azure-devices.net"));
        assert!(HubSuffix::new("127.0.0.2").unwrap().allows("127.0.0.2"));
        for wrong in ["", ".", "https://x.net", "*.azure-devices.net", "a..b"] {
            assert!(HubSuffix::new(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn the_assignment_is_kept_owner_only_and_only_for_its_scope() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path(), &config("0ne1")).unwrap(), None);
        let assignment = Assignment {
            id_scope: "0ne1".into(),
            registration_id: "drone-7".into(),
            assigned_hub: "hub-a.azure-devices.net".into(),
            device_id: "drone-7".into(),
        };
        save(dir.path(), &assignment).unwrap();
        let mode = std::fs::metadata(dir.path().join(ASSIGNMENT_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            load(dir.path(), &config("0ne1")).unwrap(),
            Some(assignment.clone())
        );
        assert_eq!(load(dir.path(), &config("0ne2")).unwrap(), None);
        assert!(
            !String::from_utf8(std::fs::read(dir.path().join(ASSIGNMENT_FILE)).unwrap())
                .unwrap()
                .contains("AAEC"),
            "no key on disk"
        );
        std::fs::write(dir.path().join(ASSIGNMENT_FILE), "{").unwrap();
        let err = load(dir.path(), &config("0ne1")).unwrap_err();
        assert!(err.to_string().contains("remove it"), "{err}");
    }
}

//! The device registry: which devices exist and how each authenticates (a shared access key,
//! or an X.509 certificate named by its SHA-256 thumbprint). Kept in `registry.json` in the
//! state directory so that `hub-sim device add` and a running hub share it: a running hub
//! reads the file again when it is asked for a device it does not know.

use crate::sas::new_key;
use crate::state_dir::{self, StateError};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How a device proves who it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DeviceAuth {
    /// Shared access keys (base64), as IoT Hub's symmetric-key devices.
    #[serde(rename_all = "camelCase")]
    Sas {
        /// Primary key, base64.
        primary_key: String,
        /// Secondary key, base64.
        secondary_key: String,
    },
    /// A client certificate whose SHA-256 thumbprint (hex, any case) is registered.
    #[serde(rename_all = "camelCase")]
    X509 {
        /// SHA-256 of the certificate's DER, hex.
        thumbprint: String,
    },
}

/// Registry errors.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The device id breaks IoT Hub's rules.
    #[error(
        "device id `{0}` is invalid: 1 to 128 characters of letters, digits and - . % _ * ? ! ( ) , : = @ $ '"
    )]
    InvalidId(String),
    /// The id is registered with another kind of authentication.
    #[error("device `{0}` is already registered with another authentication")]
    Conflict(String),
    /// The registry file could not be read or written, or is not what the hub wrote.
    #[error("registry: {0}")]
    File(#[from] StateError),
}

/// Checks a device id against IoT Hub's rules.
pub fn check_device_id(id: &str) -> Result<(), RegistryError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.%_*?!(),:=@$'".contains(c));
    if ok {
        Ok(())
    } else {
        Err(RegistryError::InvalidId(id.to_owned()))
    }
}

/// The registry, in memory and (optionally) in a file.
#[derive(Debug, Default)]
pub struct Registry {
    file: Option<PathBuf>,
    devices: RwLock<BTreeMap<String, DeviceAuth>>,
}

impl Registry {
    /// A registry kept in `file` (read now if it exists).
    pub fn open(file: &Path) -> Result<Registry, RegistryError> {
        let registry = Registry {
            file: Some(file.to_owned()),
            devices: RwLock::new(BTreeMap::new()),
        };
        registry.reload()?;
        Ok(registry)
    }

    /// A registry in memory only.
    #[cfg(test)]
    pub fn in_memory() -> Registry {
        Registry::default()
    }

    fn reload(&self) -> Result<(), RegistryError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        if let Some(devices) = state_dir::read_json(path)? {
            *self.devices.write() = devices;
        }
        Ok(())
    }

    fn save(&self, devices: &BTreeMap<String, DeviceAuth>) -> Result<(), RegistryError> {
        match &self.file {
            Some(path) => Ok(state_dir::write_json(path, devices)?),
            None => Ok(()),
        }
    }

    /// Registers a SAS device (or returns the existing one's primary key): the key, base64.
    pub fn add_sas(&self, id: &str) -> Result<String, RegistryError> {
        check_device_id(id)?;
        self.reload()?;
        let mut devices = self.devices.write();
        match devices.get(id) {
            Some(DeviceAuth::Sas { primary_key, .. }) => return Ok(primary_key.clone()),
            Some(DeviceAuth::X509 { .. }) => return Err(RegistryError::Conflict(id.to_owned())),
            None => {}
        }
        let primary_key = new_key();
        devices.insert(
            id.to_owned(),
            DeviceAuth::Sas {
                primary_key: primary_key.clone(),
                secondary_key: new_key(),
            },
        );
        self.save(&devices)?;
        Ok(primary_key)
    }

    /// Registers (or re-registers) an X.509 device by its certificate's SHA-256 thumbprint.
    pub fn add_x509(&self, id: &str, thumbprint: &str) -> Result<(), RegistryError> {
        check_device_id(id)?;
        self.reload()?;
        let mut devices = self.devices.write();
        if let Some(DeviceAuth::Sas { .. }) = devices.get(id) {
            return Err(RegistryError::Conflict(id.to_owned()));
        }
        devices.insert(
            id.to_owned(),
            DeviceAuth::X509 {
                thumbprint: thumbprint.to_ascii_uppercase(),
            },
        );
        self.save(&devices)
    }

    /// Registers `id` with `auth`, replacing what it had (the provisioning service creates
    /// devices with the credentials they attested with).
    pub fn put(&self, id: &str, auth: DeviceAuth) -> Result<(), RegistryError> {
        check_device_id(id)?;
        self.reload()?;
        let mut devices = self.devices.write();
        if devices.get(id) == Some(&auth) {
            return Ok(());
        }
        devices.insert(id.to_owned(), auth);
        self.save(&devices)
    }

    /// Deletes `id`; whether it was registered.
    #[cfg(feature = "test-support")]
    pub fn remove(&self, id: &str) -> Result<bool, RegistryError> {
        self.reload()?;
        let mut devices = self.devices.write();
        if devices.remove(id).is_none() {
            return Ok(false);
        }
        self.save(&devices)?;
        Ok(true)
    }

    /// How `id` authenticates, reading the file again when it is not known yet.
    pub fn get(&self, id: &str) -> Option<DeviceAuth> {
        if let Some(auth) = self.devices.read().get(id) {
            return Some(auth.clone());
        }
        if let Err(e) = self.reload() {
            tracing::warn!(error = %e, "registry not reloaded");
        }
        self.devices.read().get(id).cloned()
    }

    /// The number of registered devices.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.devices.read().len()
    }

    /// Whether no device is registered.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.devices.read().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_survive_a_reopen_and_keep_their_keys() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("registry.json");
        let registry = Registry::open(&file).unwrap();
        let key = registry.add_sas("drone-1").unwrap();
        assert_eq!(registry.add_sas("drone-1").unwrap(), key);
        registry.add_x509("cam-1", "ab01").unwrap();
        assert!(matches!(
            registry.add_sas("cam-1"),
            Err(RegistryError::Conflict(_))
        ));
        let again = Registry::open(&file).unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!(
            again.get("cam-1"),
            Some(DeviceAuth::X509 {
                thumbprint: "AB01".into()
            })
        );
    }

    #[test]
    fn a_device_added_by_another_process_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("registry.json");
        let running = Registry::open(&file).unwrap();
        Registry::open(&file).unwrap().add_sas("late").unwrap();
        assert!(matches!(running.get("late"), Some(DeviceAuth::Sas { .. })));
        assert!(running.get("never").is_none());
    }

    #[test]
    fn bad_ids_are_refused() {
        assert!(check_device_id("ok-1.a_b").is_ok());
        assert!(check_device_id("").is_err());
        assert!(check_device_id("a/b").is_err());
        assert!(check_device_id(&"x".repeat(129)).is_err());
    }
}

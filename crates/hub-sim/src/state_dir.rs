//! The state directory: what the hub keeps across starts (its CA, its policy keys, the
//! device registry) and the files it writes for clients at every start (`ca.pem`,
//! `eventhub-connection-string`, `service-connection-string`, `devices.txt`).

use crate::registry::new_key;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// State directory errors.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `keys.json` is not what the hub wrote.
    #[error("{path} is corrupt: {source}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
}

/// The hub's shared access policy keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyKeys {
    /// The `service` policy's key: the built-in Event Hubs endpoint's connection string.
    pub service: String,
    /// The `iothubowner` policy's key.
    pub iothubowner: String,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Creates `dir` if needed.
pub fn ensure_dir(dir: &Path) -> Result<(), StateError> {
    std::fs::create_dir_all(dir).map_err(io(dir))
}

/// Loads the policy keys from `keys.json`, creating them at first start.
pub fn policy_keys(dir: &Path) -> Result<PolicyKeys, StateError> {
    let path = dir.join("keys.json");
    match std::fs::read(&path) {
        Ok(text) => serde_json::from_slice(&text).map_err(|source| StateError::Corrupt {
            path: path.clone(),
            source,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let keys = PolicyKeys {
                service: new_key(),
                iothubowner: new_key(),
            };
            write(
                &path,
                &serde_json::to_string_pretty(&keys).expect("keys serialise"),
            )?;
            Ok(keys)
        }
        Err(e) => Err(io(&path)(e)),
    }
}

/// Writes `text` to `path`.
pub fn write(path: &Path, text: &str) -> Result<(), StateError> {
    std::fs::write(path, text).map_err(io(path))
}

/// The built-in endpoint's connection string, in the form of Microsoft's emulator.
pub fn eventhub_connection_string(host: &str, port: u16, key: &str, hub: &str) -> String {
    format!(
        "Endpoint=sb://{host}:{port};SharedAccessKeyName=service;SharedAccessKey={key};EntityPath={hub};UseDevelopmentEmulator=true"
    )
}

/// The built-in endpoint's connection string over AMQP/TLS (`service` policy), as the
/// service's: clients connect with TLS to `port` and must trust `ca.pem`.
pub fn eventhub_tls_connection_string(host: &str, port: u16, key: &str, hub: &str) -> String {
    format!(
        "Endpoint=sb://{host}:{port}/;SharedAccessKeyName=service;SharedAccessKey={key};EntityPath={hub}"
    )
}

/// The hub's `iothubowner` connection string.
pub fn service_connection_string(host: &str, key: &str) -> String {
    format!("HostName={host};SharedAccessKeyName=iothubowner;SharedAccessKey={key}")
}

/// A device's connection string.
pub fn device_connection_string(host: &str, device_id: &str, key: &str) -> String {
    format!("HostName={host};DeviceId={device_id};SharedAccessKey={key}")
}

//! The state directory: what the hub keeps across starts (its CA, its policy keys, the
//! device registry, the provisioning service's ID scope, enrollments and registrations, the
//! twins in `twins/` ([`crate::hub::twin::store`])) and
//! the files it writes for clients at every start (`ca.pem`, `eventhub-connection-string`,
//! `service-connection-string`, `devices.txt`, `dps-id-scope`).

use crate::sas::new_key;
use serde::de::DeserializeOwned;
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
    /// A JSON file is not what the hub wrote.
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
    if let Some(keys) = read_json(&path)? {
        return Ok(keys);
    }
    let keys = PolicyKeys {
        service: new_key(),
        iothubowner: new_key(),
    };
    write_json(&path, &keys)?;
    Ok(keys)
}

/// Writes `text` to `path`.
pub fn write(path: &Path, text: &str) -> Result<(), StateError> {
    std::fs::write(path, text).map_err(io(path))
}

/// Reads a JSON file another process may be replacing; `None` when it does not exist yet.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StateError> {
    match std::fs::read(path) {
        Ok(text) => serde_json::from_slice(&text)
            .map(Some)
            .map_err(|source| StateError::Corrupt {
                path: path.to_owned(),
                source,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

/// Replaces a JSON file at once (written beside it, then renamed), so that a reader in
/// another process sees the old or the new file, never half of one.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(value).expect("state serialises");
    std::fs::write(&tmp, text).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// The provisioning service's ID scope, kept in `dps-id-scope` (created at first start in
/// the service's form: `0ne` and eight upper-case hex digits).
pub fn id_scope(dir: &Path) -> Result<String, StateError> {
    let path = dir.join("dps-id-scope");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let scope = format!("0ne{:08X}", rand::random::<u32>());
            write(&path, &scope)?;
            Ok(scope)
        }
        Err(e) => Err(io(&path)(e)),
    }
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

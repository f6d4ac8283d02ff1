//! IoT Hub device credentials: the device connection string and shared access
//! signature (SAS) tokens made from its key.
//!
//! Token format (learn.microsoft.com, "Control access to IoT Hub using SAS"):
//! `SharedAccessSignature sr={urlenc(resourceUri)}&sig={urlenc(signature)}&se={expiry}`
//! with `resourceUri = {host}/devices/{deviceId}`, string to sign
//! `{urlenc(resourceUri)}\n{expiry}` and
//! `signature = base64(HMAC-SHA256(base64decode(key), stringToSign))`.

use std::fmt;

use azure_text::connection_string::{self, MalformedPart};
use azure_text::uri::encode_component;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use settings::SecretBytes;

/// Why a device connection string cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionStringError {
    /// A `key=value` part lacks its `=`.
    #[error("part {index} of the connection string is not `Key=Value`")]
    Malformed {
        /// The 1-based position of the part.
        index: usize,
    },
    /// A required key is absent.
    #[error(
        "the connection string has no `{0}` (expected HostName=...;DeviceId=...;SharedAccessKey=...)"
    )]
    Missing(&'static str),
    /// The shared access key is not base64.
    #[error("`SharedAccessKey` is not valid base64")]
    KeyNotBase64,
    /// The connection string names a module or a gateway, which this agent does not support.
    #[error("`{0}` is not supported in a device connection string for this agent")]
    Unsupported(String),
    /// The device id breaks IoT Hub's rules.
    #[error("`DeviceId` is invalid: {0}")]
    DeviceId(#[from] telemetry::wire::DeviceIdError),
}

/// A parsed device connection string:
/// `HostName={hub}.azure-devices.net;DeviceId={id};SharedAccessKey={base64 key}`.
/// The key is only present for SAS authentication; `x509=true` strings omit it.
#[derive(Clone, PartialEq, Eq)]
pub struct DeviceConnectionString {
    /// The hub's host name, e.g. `myhub.azure-devices.net`.
    pub host: String,
    /// The device id.
    pub device_id: String,
    /// The device's shared access key (decoded from base64), if any.
    pub key: Option<SecretBytes>,
}

impl fmt::Debug for DeviceConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceConnectionString")
            .field("host", &self.host)
            .field("device_id", &self.device_id)
            .field("key", &self.key)
            .finish()
    }
}

impl DeviceConnectionString {
    /// Parses a connection string; keys are case-sensitive as in the SDKs.
    pub fn parse(text: &str) -> Result<DeviceConnectionString, ConnectionStringError> {
        let mut host = None;
        let mut device_id = None;
        let mut key = None;
        for part in connection_string::parts(text) {
            let (name, value) =
                part.map_err(|MalformedPart { index }| ConnectionStringError::Malformed { index })?;
            match name {
                "HostName" => host = Some(value.to_owned()),
                "DeviceId" => device_id = Some(value.to_owned()),
                "SharedAccessKey" => {
                    let bytes = BASE64
                        .decode(value)
                        .map_err(|_| ConnectionStringError::KeyNotBase64)?;
                    key = Some(SecretBytes::new(bytes));
                }
                "ModuleId" | "GatewayHostName" | "SharedAccessKeyName" => {
                    return Err(ConnectionStringError::Unsupported(name.to_owned()));
                }
                // `x509=true` and unknown keys carry nothing the agent needs.
                _ => {}
            }
        }
        let host = host
            .filter(|h| !h.is_empty())
            .ok_or(ConnectionStringError::Missing("HostName"))?;
        let device_id = device_id.ok_or(ConnectionStringError::Missing("DeviceId"))?;
        telemetry::wire::check_device_id(&device_id)?;
        Ok(DeviceConnectionString {
            host,
            device_id,
            key,
        })
    }
}

/// The resource URI a device token grants access to: `{host}/devices/{deviceId}`.
pub fn resource_uri(host: &str, device_id: &str) -> String {
    format!("{host}/devices/{device_id}")
}

/// Makes a SAS token for `resource_uri`, valid until `expiry` (Unix seconds).
pub fn sas_token(resource_uri: &str, key: &[u8], expiry: u64) -> String {
    let encoded_uri = encode_component(resource_uri);
    let to_sign = format!("{encoded_uri}\n{expiry}");
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(to_sign.as_bytes());
    let signature = BASE64.encode(mac.finalize().into_bytes());
    format!(
        "SharedAccessSignature sr={encoded_uri}&sig={}&se={expiry}",
        encode_component(&signature)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_device_connection_string() {
        let cs = DeviceConnectionString::parse(
            "HostName=hub.azure-devices.net;DeviceId=drone-1;SharedAccessKey=AAEC",
        )
        .unwrap();
        assert_eq!(cs.host, "hub.azure-devices.net");
        assert_eq!(cs.device_id, "drone-1");
        assert_eq!(cs.key.unwrap().expose(), &[0u8, 1, 2]);
    }

    #[test]
    fn explains_what_is_wrong_with_a_connection_string() {
        use ConnectionStringError::*;
        let parse = DeviceConnectionString::parse;
        assert_eq!(
            parse("DeviceId=d;SharedAccessKey=AA==").unwrap_err(),
            Missing("HostName")
        );
        assert_eq!(
            parse("HostName=h;SharedAccessKey=AA==").unwrap_err(),
            Missing("DeviceId")
        );
        assert_eq!(
            parse("HostName=h;DeviceId=d;SharedAccessKey=***").unwrap_err(),
            KeyNotBase64
        );
        assert_eq!(
            parse("HostName=h;junk").unwrap_err(),
            Malformed { index: 2 }
        );
        assert!(matches!(
            parse("HostName=h;DeviceId=a b").unwrap_err(),
            DeviceId(_)
        ));
        assert_eq!(
            parse("HostName=h;DeviceId=d;ModuleId=m").unwrap_err(),
            Unsupported("ModuleId".into())
        );
    }

    #[test]
    fn debug_output_hides_the_key() {
        let cs = DeviceConnectionString::parse(
            "HostName=h.azure-devices.net;DeviceId=d;SharedAccessKey=c2VjcmV0",
        )
        .unwrap();
        let text = format!("{cs:?}");
        assert!(!text.contains("115"), "{text}");
        assert!(text.contains("redacted"), "{text}");
    }

    #[test]
    fn url_encoding_matches_encode_uri_component() {
        assert_eq!(
            encode_component("h.azure-devices.net/devices/d 1"),
            "h.azure-devices.net%2Fdevices%2Fd%201"
        );
        assert_eq!(encode_component("a+b/c="), "a%2Bb%2Fc%3D");
        assert_eq!(encode_component("-_.!~*'()"), "-_.!~*'()");
    }
}

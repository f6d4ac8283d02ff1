//! Who may connect: IoT Hub's CONNECT rules (client id = device id, user name
//! `{host}/{deviceId}/?api-version=...`, password = a SAS token for
//! `{host}/devices/{deviceId}` signed with the device's key, or no password and a client
//! certificate whose thumbprint is registered). Pure: no I/O.

use crate::partitions::AuthMethod;
use crate::registry::{DeviceAuth, Registry};
use crate::sas::{SasToken, normalise_resource};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rumqttc::mqttbytes::v4::{ConnectReturnCode, Login};

/// A connection the hub accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The device.
    pub device_id: String,
    /// How it proved it.
    pub method: AuthMethod,
    /// When its token expires (seconds since the epoch), for SAS.
    pub expiry: Option<u64>,
}

/// A refused connection: the CONNACK code and the reason counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What CONNACK says.
    pub code: ConnectReturnCode,
    /// The metric label.
    pub reason: &'static str,
}

fn refuse(code: ConnectReturnCode, reason: &'static str) -> Refusal {
    Refusal { code, reason }
}

/// Decides a CONNECT. `client_cert` is the SHA-256 thumbprint of the TLS client certificate.
pub fn authenticate(
    registry: &Registry,
    host: &str,
    client_id: &str,
    login: Option<&Login>,
    client_cert: Option<&str>,
    now: u64,
) -> Result<Authenticated, Refusal> {
    use ConnectReturnCode::{BadClientId, BadUserNamePassword, NotAuthorized};
    let device_id = client_id;
    if device_id.is_empty() {
        return Err(refuse(BadClientId, "bad_client_id"));
    }
    let login = login.ok_or(refuse(BadUserNamePassword, "no_user_name"))?;
    let expected_user = format!("{host}/{device_id}/");
    if !login
        .username
        .to_ascii_lowercase()
        .starts_with(&expected_user.to_ascii_lowercase())
    {
        return Err(refuse(BadUserNamePassword, "bad_user_name"));
    }
    let auth = registry
        .get(device_id)
        .ok_or(refuse(NotAuthorized, "unknown_device"))?;
    match auth {
        DeviceAuth::Sas {
            primary_key,
            secondary_key,
        } => {
            if login.password.is_empty() {
                return Err(refuse(NotAuthorized, "no_token"));
            }
            let token = SasToken::parse(&login.password)
                .map_err(|_| refuse(NotAuthorized, "malformed_token"))?;
            let expected = normalise_resource(&format!("{host}/devices/{device_id}"));
            if normalise_resource(&token.resource) != expected {
                return Err(refuse(NotAuthorized, "wrong_resource"));
            }
            let keys: Vec<Vec<u8>> = [primary_key, secondary_key]
                .iter()
                .filter_map(|k| BASE64.decode(k).ok())
                .collect();
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            token.verify(&keys, now).map_err(|e| match e {
                crate::sas::SasError::Expired(_) => refuse(NotAuthorized, "token_expired"),
                _ => refuse(NotAuthorized, "bad_signature"),
            })?;
            Ok(Authenticated {
                device_id: device_id.to_owned(),
                method: AuthMethod::Sas,
                expiry: Some(token.expiry),
            })
        }
        DeviceAuth::X509 { thumbprint } => match client_cert {
            Some(presented) if presented.eq_ignore_ascii_case(&thumbprint) => Ok(Authenticated {
                device_id: device_id.to_owned(),
                method: AuthMethod::X509,
                expiry: None,
            }),
            Some(_) => Err(refuse(NotAuthorized, "unknown_certificate")),
            None => Err(refuse(NotAuthorized, "no_certificate")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sas::make_token;

    fn setup() -> (Registry, Vec<u8>) {
        let registry = Registry::in_memory();
        let key = registry.add_sas("d1").unwrap();
        registry.add_x509("cam", "AABB").unwrap();
        (registry, BASE64.decode(key).unwrap())
    }

    fn login(token: &str) -> Login {
        Login::new("h.local/d1/?api-version=2021-04-12", token)
    }

    #[test]
    fn a_good_token_is_accepted_with_its_expiry() {
        let (registry, key) = setup();
        let token = make_token("h.local/devices/d1", &key, 500, None);
        let ok = authenticate(&registry, "h.local", "d1", Some(&login(&token)), None, 100);
        assert_eq!(
            ok,
            Ok(Authenticated {
                device_id: "d1".into(),
                method: AuthMethod::Sas,
                expiry: Some(500)
            })
        );
    }

    #[test]
    fn wrong_credentials_are_refused_with_reasons() {
        let (registry, key) = setup();
        let reason = |client: &str, login: Option<&Login>, cert: Option<&str>| {
            authenticate(&registry, "h.local", client, login, cert, 100)
                .unwrap_err()
                .reason
        };
        let good = make_token("h.local/devices/d1", &key, 500, None);
        let wrong_key = make_token("h.local/devices/d1", b"nope", 500, None);
        let other = make_token("h.local/devices/d2", &key, 500, None);
        let expired = make_token("h.local/devices/d1", &key, 50, None);
        assert_eq!(
            reason("d1", Some(&login(&wrong_key)), None),
            "bad_signature"
        );
        assert_eq!(reason("d1", Some(&login(&other)), None), "wrong_resource");
        assert_eq!(reason("d1", Some(&login(&expired)), None), "token_expired");
        assert_eq!(reason("d1", Some(&login("junk")), None), "malformed_token");
        assert_eq!(reason("d1", None, None), "no_user_name");
        let other_user = Login::new("h.local/d9/?api-version=1", good.as_str());
        assert_eq!(reason("d1", Some(&other_user), None), "bad_user_name");
        let cam = Login::new("h.local/cam/?api-version=1", "");
        assert_eq!(reason("cam", Some(&cam), None), "no_certificate");
        assert_eq!(
            reason("cam", Some(&cam), Some("CCDD")),
            "unknown_certificate"
        );
        assert!(authenticate(&registry, "h.local", "cam", Some(&cam), Some("aabb"), 1).is_ok());
        let ghost = Login::new("h.local/ghost/?api-version=1", good.as_str());
        assert_eq!(reason("ghost", Some(&ghost), None), "unknown_device");
    }
}

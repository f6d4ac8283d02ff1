//! The settings of a plain MQTT broker (`MQTT_URL`): `mqtt://` or `mqtts://`, the login
//! (`MQTT_USERNAME`, `MQTT_PASSWORD`), and over TLS the CA to trust (`IOTHUB_CA_FILE`) and
//! the client certificate (`X509_CERT_FILE`, `X509_KEY_FILE`), as for IoT Hub.

use std::net::IpAddr;

use super::{ConfigError, MQTT_PASSWORD, Settings, invalid};
use crate::transport::{Auth, BrokerAuth, Endpoint, Login, TransportConfig};

/// `MQTT_URL` read: TLS or not, host, port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BrokerUrl {
    tls: bool,
    host: String,
    port: u16,
}

impl BrokerUrl {
    /// `mqtt://HOST[:PORT]` (or `tcp://`; port 1883) or `mqtts://HOST[:PORT]` (port 8883).
    pub(super) fn parse(url: &str) -> Result<BrokerUrl, ConfigError> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("mqtts://") {
            (true, rest)
        } else if let Some(rest) = url
            .strip_prefix("mqtt://")
            .or_else(|| url.strip_prefix("tcp://"))
        {
            (false, rest)
        } else {
            return Err(invalid(
                "MQTT_URL",
                format!("`{url}` does not start with mqtt:// or mqtts://"),
            ));
        };
        let rest = rest.trim_end_matches('/');
        if rest.contains('@') {
            return Err(invalid(
                "MQTT_URL",
                "write the URL without a login: the user name goes in MQTT_USERNAME, the password in MQTT_PASSWORD or MQTT_PASSWORD_FILE",
            ));
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) => {
                let port = port
                    .parse()
                    .map_err(|_| invalid("MQTT_URL", format!("`{port}` is not a port number")))?;
                (host, port)
            }
            None => (rest, if tls { 8883 } else { 1883 }),
        };
        if host.is_empty() {
            return Err(invalid("MQTT_URL", "the host is empty"));
        }
        Ok(BrokerUrl {
            tls,
            host: host.to_owned(),
            port,
        })
    }

    fn is_loopback(&self) -> bool {
        self.host.eq_ignore_ascii_case("localhost")
            || self
                .host
                .trim_matches(['[', ']'])
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl Settings {
    /// The connection to the broker at `url` with the login and TLS settings.
    pub(super) fn broker(&self, url: &BrokerUrl) -> Result<TransportConfig, ConfigError> {
        let login = match (&self.mqtt_username, &self.mqtt_password) {
            (Some(username), Some(password)) => Some(Login {
                username: username.clone(),
                password: password.clone(),
            }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(invalid(
                    "MQTT_USERNAME",
                    "it needs MQTT_PASSWORD (or MQTT_PASSWORD_FILE) too",
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(MQTT_PASSWORD, "it needs MQTT_USERNAME too"));
            }
        };
        if !url.tls {
            if login.is_some() && !url.is_loopback() {
                return Err(invalid(
                    "MQTT_URL",
                    format!(
                        "the password would cross the network in clear to {}: use mqtts://",
                        url.host
                    ),
                ));
            }
            let tls_settings = [
                ("IOTHUB_CA_FILE", self.iothub_ca_file.is_some()),
                ("X509_CERT_FILE", self.x509_cert_file.is_some()),
                ("X509_KEY_FILE", self.x509_key_file.is_some()),
            ];
            if let Some((setting, _)) = tls_settings.iter().find(|(_, set)| *set) {
                return Err(invalid(
                    setting,
                    "it is a TLS setting, and MQTT_URL is mqtt://: use mqtts://, or remove it",
                ));
            }
        }
        let identity = match (&self.x509_cert_file, &self.x509_key_file) {
            (Some(cert_path), Some(key_path)) => Some(client_tls::Identity {
                cert_path: cert_path.clone(),
                key_path: key_path.clone(),
            }),
            (None, None) => None,
            _ => {
                return Err(invalid(
                    "X509_CERT_FILE",
                    "a client certificate needs both X509_CERT_FILE and X509_KEY_FILE",
                ));
            }
        };
        for (setting, path) in [
            ("IOTHUB_CA_FILE", &self.iothub_ca_file),
            ("X509_CERT_FILE", &self.x509_cert_file),
            ("X509_KEY_FILE", &self.x509_key_file),
        ] {
            if let Some(path) = path.as_ref().filter(|p| !p.is_file()) {
                return Err(invalid(
                    setting,
                    format!("{} is not a readable file", path.display()),
                ));
            }
        }
        let (host, port) = (url.host.clone(), url.port);
        Ok(TransportConfig {
            endpoint: if url.tls {
                Endpoint::Tls { host, port }
            } else {
                Endpoint::Tcp { host, port }
            },
            auth: Auth::Broker(BrokerAuth { login, identity }),
            ca_file: self.iothub_ca_file.clone(),
            ..TransportConfig::plain(&url.host, url.port)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_tls_host_and_port() {
        let url = |text| BrokerUrl::parse(text).unwrap();
        assert_eq!(
            url("mqtts://broker.example"),
            BrokerUrl {
                tls: true,
                host: "broker.example".into(),
                port: 8883
            }
        );
        assert_eq!(url("mqtt://10.0.0.1:1884/").port, 1884);
        assert!(!url("tcp://h").tls);
        for wrong in [
            "http://h",
            "mqtts://",
            "mqtt://h:x",
            "mqtts://drone:secret@h",
        ] {
            assert!(BrokerUrl::parse(wrong).is_err(), "{wrong}");
        }
        let secret = BrokerUrl::parse("mqtts://drone:secret@h").unwrap_err();
        assert!(!secret.to_string().contains("secret@"), "{secret}");
        assert!(url("mqtt://127.0.0.1").is_loopback() && url("mqtt://[::1]:1883").is_loopback());
        assert!(!url("mqtt://192.168.1.10").is_loopback());
    }
}

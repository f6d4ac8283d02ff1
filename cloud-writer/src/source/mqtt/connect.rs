//! How the MQTT source connects: its settings (broker, client id, share group,
//! credentials, TLS, Receive Maximum), the MQTT 5 CONNECT they make (a persistent session,
//! manual acknowledgements, the Maximum Packet Size announced), and which refusals of the
//! connection are retried.

use std::time::Duration;

use client_tls::Trust;
use rumqttc::v5::MqttOptions;
use rumqttc::v5::mqttbytes::v5::{ConnectProperties, ConnectReturnCode};
use rumqttc::{TlsConfiguration, Transport};
use url::Url;

use crate::config::MqttTls;
use crate::source::SourceError;

/// The topic filter devices publish under (IoT Hub's device-to-cloud topic).
pub const TOPIC_FILTER: &str = "devices/+/messages/events/#";

/// The largest payload IoT Hub accepts (the wire limit of a device-to-cloud message).
pub const WIRE_PAYLOAD_LIMIT: usize = 256 * 1024;

/// Largest packet accepted from the broker: the wire limit (payload and properties) plus
/// the longest topic (two length bytes and 65,535 bytes), the packet id and the fixed
/// header. The CONNECT announces it as the Maximum Packet Size, so an MQTT 5 broker does
/// not send a larger message to the writer (it discards it); the broker's own
/// `max_packet_size` should keep devices from publishing one at all. A broker that sends
/// one anyway closes the connection (the client cannot skip it), which is reported.
pub const MAX_INCOMING_PACKET: usize = WIRE_PAYLOAD_LIMIT + 2 + u16::MAX as usize + 2 + 5;

/// How long the broker keeps the writer's session after a disconnect: for ever (the MQTT
/// 5 value of `u32::MAX`), like an MQTT 3.1.1 session with `clean_session = false`.
const SESSION_NEVER_EXPIRES: u32 = u32::MAX;

/// Requests (PUBACKs, the subscription) buffered for the event loop.
pub(super) const REQUEST_CHANNEL: usize = 4096;

/// Settings of the MQTT source.
#[derive(Debug, Clone)]
pub struct MqttSettings {
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: u16,
    /// The client id: fixed per replica, so that its persistent session survives restarts.
    pub client_id: String,
    /// Shared subscription group (`$share/{group}/...`), for several replicas.
    pub share_group: Option<String>,
    /// Optional user name and password.
    pub credentials: Option<(String, crate::config::Secret)>,
    /// MQTT keep-alive.
    pub keep_alive: Duration,
    /// Receive Maximum: most unacknowledged messages the broker may send at once.
    pub receive_maximum: u16,
    /// TLS, for `mqtts://`.
    pub tls: Option<TlsConfiguration>,
}

impl MqttSettings {
    /// Settings for an `mqtt://[user:password@]host[:port]` URL, or `mqtts://` (TLS,
    /// port 8883 by default) with `tls`'s roots and client certificate.
    pub fn from_url(
        url: &Url,
        client_id: String,
        share_group: Option<String>,
        tls: &MqttTls,
    ) -> Result<Self, SourceError> {
        let (tls, default_port) = match url.scheme() {
            "mqtt" | "tcp" => (None, 1883),
            "mqtts" => {
                let trust = match &tls.ca_file {
                    Some(ca) => Trust::CaFile(ca.clone()),
                    None => Trust::System,
                };
                let config = client_tls::mqtt_tls(&trust, tls.identity.as_ref(), None)
                    .map_err(|e| SourceError::Config(format!("mqtts:// TLS: {e}")))?;
                (Some(config), 8883)
            }
            other => {
                return Err(SourceError::Config(format!(
                    "WRITER_SOURCE scheme '{other}' is not mqtt:// or mqtts://"
                )));
            }
        };
        let host = url
            .host_str()
            .ok_or_else(|| SourceError::Config("WRITER_SOURCE mqtt:// URL has no host".into()))?
            .to_string();
        let credentials = (!url.username().is_empty()).then(|| {
            (
                url.username().to_string(),
                crate::config::Secret::new(url.password().unwrap_or_default()),
            )
        });
        Ok(MqttSettings {
            host,
            port: url.port().unwrap_or(default_port),
            client_id,
            share_group,
            credentials,
            keep_alive: Duration::from_secs(30),
            receive_maximum: crate::config::DEFAULT_MQTT_RECEIVE_MAXIMUM,
            tls,
        })
    }

    /// The subscription filter: [`TOPIC_FILTER`], shared when a group is set.
    pub fn filter(&self) -> String {
        match &self.share_group {
            Some(group) => format!("$share/{group}/{TOPIC_FILTER}"),
            None => TOPIC_FILTER.to_string(),
        }
    }
}

/// The MQTT 5 CONNECT options of `settings`.
pub(super) fn options(settings: &MqttSettings) -> MqttOptions {
    let mut options = MqttOptions::new(&settings.client_id, &settings.host, settings.port);
    let mut properties = ConnectProperties::new();
    properties.session_expiry_interval = Some(SESSION_NEVER_EXPIRES);
    properties.receive_maximum = Some(settings.receive_maximum);
    properties.max_packet_size = Some(MAX_INCOMING_PACKET as u32);
    options
        .set_keep_alive(settings.keep_alive)
        .set_clean_start(false)
        .set_manual_acks(true)
        .set_connect_properties(properties)
        .set_request_channel_capacity(REQUEST_CHANNEL);
    if let Some((user, password)) = &settings.credentials {
        options.set_credentials(user, password.expose());
    }
    if let Some(tls) = &settings.tls {
        options.set_transport(Transport::tls_with_config(tls.clone()));
    }
    options
}

/// Whether a broker's refusal of the connection may pass by itself (busy, unavailable, over a
/// quota or a rate, moving), so that the source reconnects with backoff; the other refusals
/// (credentials, authorization, client id, protocol, a ban, a malformed request) stop it.
pub(super) fn refusal_passes(code: ConnectReturnCode) -> bool {
    use ConnectReturnCode as C;
    match code {
        C::ServiceUnavailable
        | C::ServerUnavailable
        | C::ServerBusy
        | C::QuotaExceeded
        | C::ConnectionRateExceeded
        | C::UseAnotherServer
        | C::ServerMoved
        | C::UnspecifiedError
        | C::ImplementationSpecificError => true,
        C::Success
        | C::RefusedProtocolVersion
        | C::BadClientId
        | C::MalformedPacket
        | C::ProtocolError
        | C::UnsupportedProtocolVersion
        | C::ClientIdentifierNotValid
        | C::BadUserNamePassword
        | C::NotAuthorized
        | C::Banned
        | C::BadAuthenticationMethod
        | C::TopicNameInvalid
        | C::PacketTooLarge
        | C::PayloadFormatInvalid
        | C::RetainNotSupported
        | C::QoSNotSupported => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_broker_is_retried_and_a_refusal_of_the_settings_stops_the_source() {
        use ConnectReturnCode as C;
        for code in [
            C::ServerBusy,
            C::ServerUnavailable,
            C::ServiceUnavailable,
            C::QuotaExceeded,
            C::ConnectionRateExceeded,
            C::UseAnotherServer,
            C::ServerMoved,
            C::UnspecifiedError,
        ] {
            assert!(refusal_passes(code), "{code:?}");
        }
        for code in [
            C::BadUserNamePassword,
            C::NotAuthorized,
            C::BadClientId,
            C::ClientIdentifierNotValid,
            C::RefusedProtocolVersion,
            C::UnsupportedProtocolVersion,
            C::Banned,
            C::BadAuthenticationMethod,
        ] {
            assert!(!refusal_passes(code), "{code:?}");
        }
    }

    #[test]
    fn shared_filter_names_the_group() {
        let url = Url::parse("mqtt://user:pw@broker:1884").unwrap();
        let mut settings =
            MqttSettings::from_url(&url, "w-1".into(), None, &MqttTls::default()).unwrap();
        assert_eq!(settings.port, 1884);
        assert_eq!(settings.filter(), "devices/+/messages/events/#");
        settings.share_group = Some("writers".into());
        assert_eq!(
            settings.filter(),
            "$share/writers/devices/+/messages/events/#"
        );
        assert!(!format!("{settings:?}").contains("pw"));
    }
}

//! What flows through the partitions: a device message as the hub received it ([`Incoming`])
//! and the event it becomes once enqueued ([`Event`]), with how its sender authenticated.

use bytes::Bytes;
use std::sync::Arc;

/// How an event's sender authenticated (`iothub-connection-auth-method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// A SAS token.
    Sas,
    /// An X.509 client certificate registered by thumbprint.
    X509,
    /// Put in through the library API.
    Api,
}

impl AuthMethod {
    /// The JSON IoT Hub puts in `iothub-connection-auth-method`.
    pub fn as_json(self) -> &'static str {
        match self {
            AuthMethod::Sas => {
                r#"{"scope":"device","type":"sas","issuer":"iothub","acceptingIpFilterRule":null}"#
            }
            AuthMethod::X509 => {
                r#"{"scope":"device","type":"x509Certificate","issuer":"iothub","acceptingIpFilterRule":null}"#
            }
            AuthMethod::Api => {
                r#"{"scope":"hub","type":"api","issuer":"iothub","acceptingIpFilterRule":null}"#
            }
        }
    }
}

/// Which data source an event comes from (`iothub-message-source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageSource {
    /// A device's message.
    Telemetry,
    /// A device connected or disconnected (routed with the `connection-state` route).
    DeviceConnectionStateEvents,
    /// A twin changed (routed with the `twin-changes` route).
    TwinChangeEvents,
}

impl MessageSource {
    /// The value IoT Hub puts in `iothub-message-source`.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageSource::Telemetry => "Telemetry",
            MessageSource::DeviceConnectionStateEvents => "deviceConnectionStateEvents",
            MessageSource::TwinChangeEvents => "twinChangeEvents",
        }
    }
}

/// A device message as the hub received it, before it is enqueued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// The authenticated device id.
    pub device_id: Arc<str>,
    /// How the device authenticated.
    pub auth: AuthMethod,
    /// The data source (telemetry, or an event the hub emits).
    pub source: MessageSource,
    /// The payload.
    pub body: Bytes,
    /// `$.mid`.
    pub message_id: Option<String>,
    /// `$.cid`.
    pub correlation_id: Option<String>,
    /// `$.uid`.
    pub user_id: Option<String>,
    /// `$.ct`.
    pub content_type: Option<String>,
    /// `$.ce`.
    pub content_encoding: Option<String>,
    /// The property bag's application properties, in order.
    pub properties: Vec<(String, String)>,
}

impl Incoming {
    /// A message with a body only.
    pub fn new(device_id: &str, body: impl Into<Bytes>) -> Incoming {
        Incoming {
            device_id: device_id.into(),
            auth: AuthMethod::Api,
            source: MessageSource::Telemetry,
            body: body.into(),
            message_id: None,
            correlation_id: None,
            user_id: None,
            content_type: None,
            content_encoding: None,
            properties: Vec::new(),
        }
    }
}

/// An event in a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The partition's sequence number, from 0.
    pub sequence_number: i64,
    /// Bytes of the partition's stream before this event.
    pub offset: i64,
    /// When it was enqueued, milliseconds since the Unix epoch.
    pub enqueued_ms: i64,
    /// What the device sent.
    pub message: Incoming,
}

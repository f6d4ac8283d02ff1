//! The writer's source as one setting (`WRITER_SOURCE`): an `mqtt://` or `mqtts://` URL, an
//! Event Hubs connection string (a shared access policy), or an Event Hubs namespace and hub
//! as `sb://{fully qualified namespace}/{event hub}` (Entra ID tokens), parsed and shown
//! without their secrets.

use std::fmt;

use azure_text::connection_string;
use settings::{ConfigError, Secret};
use url::Url;

/// Where messages come from.
#[derive(Debug, Clone)]
pub enum SourceSpec {
    /// An MQTT broker, `mqtt://[user:password@]host[:port]` (the password is redacted in `Debug`).
    Mqtt(MqttUrl),
    /// IoT Hub's built-in Event Hubs-compatible endpoint, or an Event Hubs namespace it
    /// routes to.
    EventHubs(EventHubsConnection),
}

/// An `mqtt://` URL whose `Debug` hides the password.
#[derive(Clone, PartialEq)]
pub struct MqttUrl(pub Url);

impl fmt::Debug for MqttUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.clone();
        if shown.password().is_some() {
            let _ = shown.set_password(Some("redacted"));
        }
        write!(f, "{shown}")
    }
}

/// The event hub the writer reads, and how it is authorized.
#[derive(Debug, Clone)]
pub struct EventHubsConnection {
    /// The fully qualified namespace, e.g. `myhub.servicebus.windows.net`.
    pub namespace: String,
    /// `EntityPath`: the event hub.
    pub entity_path: String,
    /// With `UseDevelopmentEmulator=true` (a local emulator, or `hub-sim`): the Endpoint's
    /// host and port as a plain AMQP address, `amqp://localhost:5672`.
    pub emulator_endpoint: Option<String>,
    /// How the writer is authorized.
    pub auth: EventHubsAuth,
}

/// How the writer is authorized to read the event hub.
#[derive(Clone)]
pub enum EventHubsAuth {
    /// A shared access policy, from a connection string (IoT Hub's built-in endpoint takes
    /// only these).
    SharedAccessKey {
        /// `SharedAccessKeyName`.
        key_name: String,
        /// The whole connection string (for the SDK).
        raw: Secret,
    },
    /// Entra ID tokens of the writer's credential (an Event Hubs namespace of one's own;
    /// the identity needs "Azure Event Hubs Data Receiver").
    Entra,
}

impl fmt::Debug for EventHubsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventHubsAuth::SharedAccessKey { key_name, .. } => {
                write!(f, "SharedAccessKey({key_name})")
            }
            EventHubsAuth::Entra => f.write_str("Entra"),
        }
    }
}

/// The shape of an Event Hubs connection string, for messages.
const CONNECTION_STRING_SHAPE: &str = "Endpoint=sb://{namespace}.servicebus.windows.net/;SharedAccessKeyName=...;SharedAccessKey=...;EntityPath=...";

impl EventHubsConnection {
    /// Parses an Event Hubs connection string with the SDK's parser (so that what is
    /// accepted here, the SDK accepts), requiring a key and an `EntityPath`.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            name: "WRITER_SOURCE",
            message,
        };
        let parsed: azure_messaging_eventhubs::ConnectionString = text.parse().map_err(
            |e: azure_core::Error| {
                invalid(format!(
                    "not a usable Event Hubs connection string ({e}); expected {CONNECTION_STRING_SHAPE}"
                ))
            },
        )?;
        let (Some(key_name), Some(_)) = (
            parsed.shared_access_key_name.clone(),
            parsed.shared_access_key.as_ref(),
        ) else {
            return Err(invalid(format!(
                "the Event Hubs connection string needs SharedAccessKeyName and SharedAccessKey (a policy with the Service connect or Listen right); expected {CONNECTION_STRING_SHAPE}"
            )));
        };
        let Some(entity_path) = parsed.entity_path.clone() else {
            return Err(invalid(format!(
                "the Event Hubs connection string has no EntityPath: use the IoT hub's built-in endpoint's Event Hub-compatible connection string, {CONNECTION_STRING_SHAPE}"
            )));
        };
        let value_of = |name: &str| connection_string::value_ignore_case(text, name);
        let emulator_endpoint = value_of("UseDevelopmentEmulator")
            .filter(|v| v.eq_ignore_ascii_case("true"))
            .and_then(|_| value_of("Endpoint"))
            .and_then(|endpoint| {
                let host = endpoint.split_once("://").map_or(endpoint, |(_, h)| h);
                let host = host.trim_end_matches('/');
                (!host.is_empty()).then(|| format!("amqp://{host}"))
            });
        Ok(EventHubsConnection {
            namespace: parsed.fully_qualified_namespace.clone(),
            entity_path,
            emulator_endpoint,
            auth: EventHubsAuth::SharedAccessKey {
                key_name,
                raw: Secret::new(text),
            },
        })
    }

    /// Parses `sb://{fully qualified namespace}/{event hub}`: a namespace read with Entra ID
    /// tokens.
    pub fn parse_namespace(url: &Url) -> Result<Self, ConfigError> {
        let invalid = |message: &str| ConfigError::Invalid {
            name: "WRITER_SOURCE",
            message: format!(
                "{message}: expected sb://{{namespace}}.servicebus.windows.net/{{event hub}} (Entra ID) or a connection string"
            ),
        };
        let namespace = url.host_str().ok_or_else(|| invalid("no namespace"))?;
        let hub = url.path().trim_matches('/');
        if hub.is_empty() || hub.contains('/') {
            return Err(invalid("no event hub after the namespace"));
        }
        if !url.username().is_empty() || url.password().is_some() || url.query().is_some() {
            return Err(invalid(
                "an sb:// source carries no credential (Entra ID tokens are the writer's own)",
            ));
        }
        Ok(EventHubsConnection {
            namespace: namespace.to_string(),
            entity_path: hub.to_string(),
            emulator_endpoint: None,
            auth: EventHubsAuth::Entra,
        })
    }

    /// The address the client dials: `custom` when given, the Endpoint as plain AMQP for a
    /// development emulator (as Microsoft's emulator speaks), else the SDK's default
    /// (`amqps://` to the namespace).
    pub fn dial_endpoint(&self, custom: Option<&Url>) -> Option<String> {
        custom
            .map(Url::to_string)
            .or_else(|| self.emulator_endpoint.clone())
    }
}

impl SourceSpec {
    /// Parses `WRITER_SOURCE`.
    pub fn parse(text: &str) -> Result<SourceSpec, ConfigError> {
        let text = text.trim();
        if text.starts_with("mqtt://") || text.starts_with("tcp://") || text.starts_with("mqtts://")
        {
            let url = Url::parse(text).map_err(|e| ConfigError::Invalid {
                name: "WRITER_SOURCE",
                message: format!("not an mqtt://host:port or mqtts://host:port URL: {e}"),
            })?;
            if url.host_str().is_none() {
                return Err(ConfigError::Invalid {
                    name: "WRITER_SOURCE",
                    message: "the mqtt:// URL has no host".into(),
                });
            }
            return Ok(SourceSpec::Mqtt(MqttUrl(url)));
        }
        if text.starts_with("sb://") {
            let url = Url::parse(text).map_err(|e| ConfigError::Invalid {
                name: "WRITER_SOURCE",
                message: format!("not an sb://namespace/event-hub URL: {e}"),
            })?;
            return EventHubsConnection::parse_namespace(&url).map(SourceSpec::EventHubs);
        }
        if connection_string::value_ignore_case(text, "Endpoint").is_some() {
            return EventHubsConnection::parse(text).map(SourceSpec::EventHubs);
        }
        Err(ConfigError::Invalid {
            name: "WRITER_SOURCE",
            message: "expected mqtt://host:port, an Event Hubs connection string (Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...;EntityPath=...), or sb://{namespace}.servicebus.windows.net/{event hub} for Entra ID".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emulator_string_is_dialled_as_plain_amqp_unless_a_custom_endpoint_is_set() {
        let parse = |text: &str| match SourceSpec::parse(text).unwrap() {
            SourceSpec::EventHubs(connection) => connection,
            other => panic!("{other:?}"),
        };
        let emulator = parse(
            "Endpoint=sb://localhost:5673;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0;EntityPath=hub;UseDevelopmentEmulator=true",
        );
        assert_eq!(
            emulator.dial_endpoint(None).as_deref(),
            Some("amqp://localhost:5673")
        );
        let proxy = Url::parse("amqps://proxy.example:5671").unwrap();
        assert_eq!(
            emulator.dial_endpoint(Some(&proxy)).as_deref(),
            Some("amqps://proxy.example:5671")
        );
        let hub = parse(
            "Endpoint=sb://hub.servicebus.windows.net/;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0;EntityPath=hub",
        );
        assert_eq!(hub.dial_endpoint(None), None);
        assert_eq!(
            hub.dial_endpoint(Some(&proxy)).as_deref(),
            Some("amqps://proxy.example:5671")
        );
        let off = parse(
            "Endpoint=sb://localhost:5673;SharedAccessKeyName=service;SharedAccessKey=c2VjcmV0;EntityPath=hub;UseDevelopmentEmulator=false",
        );
        assert_eq!(off.dial_endpoint(None), None);
    }

    mod connection_strings {
        use proptest::prelude::*;

        use super::super::*;

        const PARTS: [&str; 4] = [
            "Endpoint",
            "SharedAccessKeyName",
            "SharedAccessKey",
            "EntityPath",
        ];

        fn parts() -> impl Strategy<Value = (String, String, String, String)> {
            (
                "[a-z][a-z0-9-]{2,20}",
                "[A-Za-z][A-Za-z0-9]{0,11}",
                "[A-Za-z0-9+/]{8,43}=?",
                "[a-z0-9][a-z0-9-]{0,19}",
            )
        }

        fn text(fields: &[(&str, String)], trailing: bool) -> String {
            let mut text = fields
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join(";");
            if trailing {
                text.push(';');
            }
            text
        }

        proptest! {
            /// Any order, a trailing ';', unknown keys: the parts come out, the key never
            /// shows in Debug output.
            #[test]
            fn parses_the_parts_in_any_order(
                (ns, key_name, key, hub) in parts(),
                order in Just(vec![0usize, 1, 2, 3, 4]).prop_shuffle(),
                trailing in any::<bool>(),
            ) {
                let values = [
                    format!("sb://{ns}.servicebus.windows.net/"),
                    key_name.clone(),
                    key.clone(),
                    hub.clone(),
                    "x".to_string(),
                ];
                let names = ["Endpoint", "SharedAccessKeyName", "SharedAccessKey", "EntityPath", "Unknown"];
                let fields: Vec<(&str, String)> = order.iter().map(|&i| (names[i], values[i].clone())).collect();
                let text = text(&fields, trailing);
                let SourceSpec::EventHubs(hub_connection) = SourceSpec::parse(&text).unwrap() else {
                    panic!("not Event Hubs: {text}");
                };
                prop_assert_eq!(&hub_connection.namespace, &format!("{ns}.servicebus.windows.net"));
                let EventHubsAuth::SharedAccessKey { key_name: named, raw } = &hub_connection.auth else {
                    panic!("not a shared access key: {hub_connection:?}");
                };
                prop_assert_eq!(named, &key_name);
                prop_assert_eq!(raw.expose(), text.trim());
                prop_assert_eq!(&hub_connection.entity_path, &hub);
                let shown = format!("{hub_connection:?}");
                prop_assert!(!shown.contains(&key), "{}", shown);
            }

            /// Without one of its four parts, the string is refused, the message names
            /// WRITER_SOURCE and the part, and never shows the key.
            #[test]
            fn refuses_a_string_missing_a_part(
                (ns, key_name, key, hub) in parts(),
                missing in 0usize..4,
            ) {
                let values = [format!("sb://{ns}.servicebus.windows.net/"), key_name, key.clone(), hub];
                let fields: Vec<(&str, String)> = (0..4)
                    .filter(|&i| i != missing)
                    .map(|i| (PARTS[i], values[i].clone()))
                    .collect();
                let err = SourceSpec::parse(&text(&fields, false)).unwrap_err().to_string();
                prop_assert!(err.contains("WRITER_SOURCE"), "{}", err);
                prop_assert!(err.contains(PARTS[missing]), "{}", err);
                prop_assert!(!err.contains(&key), "{}", err);
            }
        }
    }
}

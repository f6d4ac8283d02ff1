//! IoT Hub's device twin and direct methods over MQTT (protocols.md, "Device twin and
//! direct methods"): the topics, the request ids, and the typed events and sends the
//! agent's control plane ([`crate::twin`]) works with.
//!
//! After every CONNACK the connection subscribes to [`SUBSCRIPTIONS`]; once the hub grants
//! them it reads the whole twin (`$iothub/twin/GET/?$rid=`) and hands the agent a
//! [`CloudLink`] ([`CloudEvent::Ready`]). Everything on these topics goes with QoS 0, as the
//! IoT Hub SDKs send twin requests and method answers: no packet id, so the
//! [`super::inflight`] bookkeeping of buffered records never sees them, and a lost request
//! is noticed by its missing answer (the control plane asks again). A hub that refuses the
//! subscriptions (the basic tier has no twin) leaves the agent on its local settings.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rumqttc::{AsyncClient, Publish, QoS, SubscribeFilter};
use serde_json::{Map, Value};

/// The topics of the twin and of direct methods.
pub(crate) const SUBSCRIPTIONS: [&str; 3] = [
    "$iothub/twin/res/#",
    "$iothub/twin/PATCH/properties/desired/#",
    "$iothub/methods/POST/#",
];

/// A request id of the agent's own twin requests.
pub(crate) type Rid = u64;

/// The largest method payload the agent reads; a larger one is answered 413.
pub(crate) const MAX_METHOD_PAYLOAD: usize = 4096;

/// What the hub sent on the twin and method topics.
#[derive(Debug)]
pub(crate) enum CloudEvent {
    /// The hub granted the subscriptions and the twin read is under way: send through this.
    Ready(CloudLink),
    /// The whole twin, as read after connecting (or when the control plane asked again).
    Twin(Twin),
    /// The hub answered a twin read with an error status.
    TwinRefused {
        /// The status.
        status: u16,
    },
    /// The desired properties changed.
    Desired(Desired),
    /// The hub's answer to the reported patch `rid` (204: stored).
    Reported {
        /// The request id of the patch.
        rid: Rid,
        /// The status.
        status: u16,
    },
    /// A direct method call, to be answered with [`CloudLink::respond`].
    Method(MethodRequest),
}

/// A twin document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Twin {
    /// The desired properties.
    pub(crate) desired: Desired,
    /// The reported properties (without `$version` and `$metadata`).
    pub(crate) reported: Map<String, Value>,
}

/// Desired properties: a whole document or a patch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Desired {
    /// Their `$version`.
    pub(crate) version: u64,
    /// The properties, without the read-only `$` ones.
    pub(crate) properties: Map<String, Value>,
}

/// A direct method call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MethodRequest {
    /// The hub's request id, to answer with.
    pub(crate) rid: String,
    /// The method name.
    pub(crate) name: String,
    /// The payload's size in bytes (the agent's methods take no arguments).
    pub(crate) payload_len: usize,
}

/// What a request id of this link was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Patch,
}

/// The agent's twin requests awaiting an answer on one link.
#[derive(Debug, Default)]
struct Requests {
    next: Rid,
    open: HashMap<Rid, Kind>,
}

/// Requests open at most per link: the control plane has one read and one patch out at a
/// time; answers the hub never gives must not grow this without bound.
const MAX_OPEN: usize = 16;

impl Requests {
    fn open(&mut self, kind: Kind) -> Rid {
        if self.open.len() >= MAX_OPEN {
            self.open.clear();
        }
        self.next += 1;
        self.open.insert(self.next, kind);
        self.next
    }
}

/// Sends twin requests and method answers on one link. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct CloudLink {
    client: AsyncClient,
    requests: Arc<Mutex<Requests>>,
}

impl CloudLink {
    pub(super) fn new(client: AsyncClient) -> CloudLink {
        CloudLink {
            client,
            requests: Arc::default(),
        }
    }

    /// Subscribes to the twin and method topics (QoS 0); `false` if the link is closing.
    pub(super) fn subscribe(&self) -> bool {
        let filters = SUBSCRIPTIONS
            .iter()
            .map(|topic| SubscribeFilter::new((*topic).to_owned(), QoS::AtMostOnce));
        self.client.try_subscribe_many(filters).is_ok()
    }

    /// Asks for the whole twin; `false` if the link is closing.
    pub(crate) fn read_twin(&self) -> bool {
        let rid = self.requests().open(Kind::Read);
        self.send(format!("$iothub/twin/GET/?$rid={rid}"), Vec::new())
    }

    /// Sends a patch of the reported properties; its request id, or `None` if the link is
    /// closing.
    pub(crate) fn patch_reported(&self, patch: &Value) -> Option<Rid> {
        let rid = self.requests().open(Kind::Patch);
        let topic = format!("$iothub/twin/PATCH/properties/reported/?$rid={rid}");
        self.send(topic, patch.to_string().into_bytes())
            .then_some(rid)
    }

    /// Answers the method call `rid` with `status` and `payload`; `false` if the link is
    /// closing.
    pub(crate) fn respond(&self, rid: &str, status: u16, payload: &Value) -> bool {
        let topic = format!("$iothub/methods/res/{status}/?$rid={rid}");
        self.send(topic, payload.to_string().into_bytes())
    }

    fn send(&self, topic: String, payload: Vec<u8>) -> bool {
        match self
            .client
            .try_publish(topic, QoS::AtMostOnce, false, payload)
        {
            Ok(()) => true,
            Err(err) => {
                tracing::debug!(%err, "twin or method message not queued");
                false
            }
        }
    }

    fn requests(&self) -> std::sync::MutexGuard<'_, Requests> {
        self.requests.lock().expect("twin requests lock")
    }

    /// The event an incoming publish on a twin or method topic makes; `None` for anything
    /// else, or what cannot be read (logged).
    pub(super) fn incoming(&self, publish: &Publish) -> Option<CloudEvent> {
        let event = self.parse(publish);
        if let Err(problem) = &event {
            tracing::warn!(topic = %publish.topic, %problem, "message from the hub ignored");
        }
        event.ok().flatten()
    }

    fn parse(&self, publish: &Publish) -> Result<Option<CloudEvent>, String> {
        let topic = publish.topic.as_str();
        if let Some(rest) = topic.strip_prefix("$iothub/twin/res/") {
            let (status, query) = rest.split_once("/?").ok_or("no query")?;
            let status: u16 = status.parse().map_err(|_| "status not a number")?;
            let rid: Rid = param(query, "$rid")
                .and_then(|rid| rid.parse().ok())
                .ok_or("no $rid of the agent's")?;
            let kind = self.requests().open.remove(&rid);
            return match kind {
                None => Ok(None),
                Some(Kind::Patch) => Ok(Some(CloudEvent::Reported { rid, status })),
                Some(Kind::Read) if status == 200 => {
                    Ok(Some(CloudEvent::Twin(twin(&publish.payload)?)))
                }
                Some(Kind::Read) => Ok(Some(CloudEvent::TwinRefused { status })),
            };
        }
        if let Some(query) = topic.strip_prefix("$iothub/twin/PATCH/properties/desired/") {
            let mut desired = desired(object(&publish.payload)?)?;
            if desired.version == 0 {
                desired.version = param(query.trim_start_matches('?'), "$version")
                    .and_then(|v| v.parse().ok())
                    .ok_or("no $version")?;
            }
            return Ok(Some(CloudEvent::Desired(desired)));
        }
        if let Some(rest) = topic.strip_prefix("$iothub/methods/POST/") {
            let (name, query) = rest.split_once("/?").ok_or("no query")?;
            let rid = param(query, "$rid").ok_or("no $rid")?;
            return Ok(Some(CloudEvent::Method(MethodRequest {
                rid: rid.to_owned(),
                name: name.to_owned(),
                payload_len: publish.payload.len(),
            })));
        }
        Ok(None)
    }
}

/// The value of `key` in a topic's query string.
fn param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
}

fn object(payload: &[u8]) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice(payload) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("not a JSON object".into()),
        Err(err) => Err(format!("not JSON: {err}")),
    }
}

/// Desired properties from their JSON object: `$version` taken out (0 if absent), the
/// other `$` properties dropped.
fn desired(mut properties: Map<String, Value>) -> Result<Desired, String> {
    let version = match properties.remove("$version") {
        None => 0,
        Some(version) => version.as_u64().ok_or("$version not a number")?,
    };
    properties.retain(|key, _| !key.starts_with('$'));
    Ok(Desired {
        version,
        properties,
    })
}

fn twin(payload: &[u8]) -> Result<Twin, String> {
    let mut document = object(payload)?;
    let section = |document: &mut Map<String, Value>, name: &str| match document.remove(name) {
        Some(Value::Object(map)) => Ok(map),
        None => Ok(Map::new()),
        Some(_) => Err(format!("{name} not an object")),
    };
    let desired = desired(section(&mut document, "desired")?)?;
    let mut reported = section(&mut document, "reported")?;
    reported.retain(|key, _| !key.starts_with('$'));
    Ok(Twin { desired, reported })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn link() -> CloudLink {
        let (client, _eventloop) = AsyncClient::new(rumqttc::MqttOptions::new("d", "h", 1), 8);
        CloudLink::new(client)
    }

    fn publish(topic: &str, payload: &Value) -> Publish {
        let body = match payload {
            Value::Null => Vec::new(),
            other => other.to_string().into_bytes(),
        };
        Publish::new(topic, QoS::AtMostOnce, body)
    }

    // Topics and documents as protocols.md gives them (learn.microsoft.com, "Communicate
    // with an IoT hub using MQTT": twin GET, desired patch, method request).
    #[test]
    fn the_hubs_messages_become_typed_events() {
        let link = link();
        let read = link.requests().open(Kind::Read);
        let twin = publish(
            &format!("$iothub/twin/res/200/?$rid={read}"),
            &json!({
                "desired": {"reportInterval": 1, "$version": 4},
                "reported": {"agent": {"version": "1"}, "$version": 9}
            }),
        );
        let Some(CloudEvent::Twin(twin)) = link.incoming(&twin) else {
            panic!("a twin");
        };
        assert_eq!(twin.desired.version, 4);
        assert_eq!(twin.desired.properties["reportInterval"], 1);
        assert_eq!(
            Value::Object(twin.reported),
            json!({"agent": {"version": "1"}})
        );

        let patch = link.requests().open(Kind::Patch);
        let answer = publish(
            &format!("$iothub/twin/res/204/?$rid={patch}&$version=10"),
            &Value::Null,
        );
        assert!(matches!(
            link.incoming(&answer),
            Some(CloudEvent::Reported { rid, status: 204 }) if rid == patch
        ));
        // An answer to no request of this link is nobody's.
        assert!(link.incoming(&answer).is_none());

        let desired = publish(
            "$iothub/twin/PATCH/properties/desired/?$version=5",
            &json!({"reportInterval": 2, "$version": 5}),
        );
        let Some(CloudEvent::Desired(desired)) = link.incoming(&desired) else {
            panic!("a patch");
        };
        assert_eq!(desired.version, 5);
        assert_eq!(
            Value::Object(desired.properties),
            json!({"reportInterval": 2})
        );

        let method = publish("$iothub/methods/POST/reportNow/?$rid=1a", &json!({}));
        assert_eq!(
            link.incoming(&method).map(|e| format!("{e:?}")),
            Some(format!(
                "{:?}",
                CloudEvent::Method(MethodRequest {
                    rid: "1a".into(),
                    name: "reportNow".into(),
                    payload_len: 2
                })
            ))
        );
    }

    #[test]
    fn what_cannot_be_read_is_ignored() {
        let link = link();
        let read = link.requests().open(Kind::Read);
        for bad in [
            publish(&format!("$iothub/twin/res/200/?$rid={read}"), &json!([1])),
            publish("$iothub/twin/PATCH/properties/desired/", &json!({"a": 1})),
            publish("$iothub/methods/POST/status", &json!({})),
            publish("devices/d/messages/devicebound/x", &json!({})),
        ] {
            assert!(link.incoming(&bad).is_none(), "{}", bad.topic);
        }
    }
}

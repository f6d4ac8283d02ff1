//! The request/response nodes: CBS (`$cbs`, `put-token`) and Event Hubs management
//! (`$management`, `READ` of the hub and of a partition). A request arrives on the client's
//! sender link to the node; its answer goes out on the client's receiver link from the same
//! node, in the same session, with `correlation-id` = the request's `message-id` and the
//! status in the application properties `status-code` and `status-description`.

use super::entra::{EntraAccess, LOCAL_AUTH_DISABLED};
use crate::partitions::Partitions;
use crate::sas::{SasToken, normalise_resource, now_secs};
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, Properties};
use fe2o3_amqp::types::primitives::{Array, OrderedMap, SimpleValue, Timestamp, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// A response ready to send: its properties, status and body.
pub(crate) type Response = Message<fe2o3_amqp::types::messaging::AmqpValue<Value>>;

/// What a connection has proved over CBS.
#[derive(Debug, Default)]
pub(crate) struct ConnectionAuth {
    /// Seconds since the epoch until which a put-token authorized the connection.
    until: AtomicU64,
}

impl ConnectionAuth {
    /// Whether a valid token was put and has not expired.
    pub(crate) fn is_authorized(&self) -> bool {
        self.until.load(Ordering::Relaxed) > now_secs()
    }

    /// Resolves once the authorization has run out: the last token put expired and no
    /// later one was put. Event Hubs drops the links of a connection whose token expired;
    /// a client keeps them by putting a fresh token before.
    pub(crate) async fn expired(&self) {
        loop {
            let (until, now) = (self.until.load(Ordering::Relaxed), now_secs());
            if until <= now {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_secs(until - now)).await;
        }
    }

    /// Seconds since the epoch until which the connection is authorized.
    pub(crate) fn until(&self) -> u64 {
        self.until.load(Ordering::Relaxed)
    }
}

/// What a request handler needs of the hub.
pub(crate) struct Node<'a> {
    /// The hub (entity) name.
    pub(crate) hub: &'a str,
    /// The `service` policy key.
    pub(crate) key: &'a str,
    /// The Entra ID trust, when the endpoint plays a namespace that takes tokens.
    pub(crate) entra: Option<&'a EntraAccess>,
    /// The partitions.
    pub(crate) partitions: &'a Partitions,
    /// When the hub was created (ms since the epoch).
    pub(crate) created_ms: i64,
}

fn app_string(message: &Message<Body<Value>>, name: &str) -> Option<String> {
    let props = message.application_properties.as_ref()?;
    match props.0.get(name)? {
        SimpleValue::String(s) => Some(s.clone()),
        SimpleValue::Symbol(s) => Some(s.0.clone()),
        _ => None,
    }
}

fn body_string(message: &Message<Body<Value>>) -> Option<String> {
    match &message.body {
        Body::Value(v) => match &v.0 {
            Value::String(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Checks a policy token for this hub: the `service` policy, signed with its key, not
/// expired, for the namespace or the hub; refused outright when local authentication is
/// disabled.
pub(crate) fn check_policy_token(node: &Node<'_>, token: &str) -> Result<u64, String> {
    if node.entra.is_some_and(|entra| !entra.local_auth) {
        return Err(LOCAL_AUTH_DISABLED.to_string());
    }
    let token = SasToken::parse(token).map_err(|e| e.to_string())?;
    if token.key_name.as_deref().is_some_and(|k| k != "service") {
        return Err(format!("unknown policy {:?}", token.key_name));
    }
    let resource = normalise_resource(&token.resource);
    let path = resource.split_once('/').map_or("", |(_, path)| path);
    let path = path.split('/').next().unwrap_or("");
    if !path.is_empty() && !path.eq_ignore_ascii_case(node.hub) {
        return Err(format!("token is for `{}`, not this hub", token.resource));
    }
    token
        .verify(&[node.key.as_bytes()], now_secs())
        .map_err(|e| e.to_string())?;
    Ok(token.expiry)
}

fn respond(
    request: &Message<Body<Value>>,
    status: i32,
    description: &str,
    body: Value,
) -> Response {
    let correlation_id = request
        .properties
        .as_ref()
        .and_then(|p| p.message_id.clone());
    let properties = Properties {
        correlation_id,
        ..Properties::default()
    };
    Message::builder()
        .properties(properties)
        .application_properties(
            ApplicationProperties::builder()
                .insert("status-code", SimpleValue::Int(status))
                .insert(
                    "status-description",
                    SimpleValue::String(description.into()),
                )
                .build(),
        )
        .value(body)
        .build()
}

/// Answers a `$cbs` request: a shared access signature, or (`type` `jwt`) an Entra ID token
/// where the endpoint takes them. Returns the response and whether it was refused.
pub(crate) async fn cbs(
    node: &Node<'_>,
    auth: &ConnectionAuth,
    request: &Message<Body<Value>>,
) -> (Response, Option<&'static str>) {
    if app_string(request, "operation").as_deref() != Some("put-token") {
        return (
            respond(request, 400, "only put-token is supported", Value::Null),
            Some("cbs_operation"),
        );
    }
    let Some(token) = body_string(request) else {
        return (
            respond(request, 400, "the body must be the token", Value::Null),
            Some("cbs_malformed"),
        );
    };
    let checked = match (app_string(request, "type").as_deref(), node.entra) {
        (Some("jwt"), Some(entra)) => entra.check(&token, node.hub).await,
        (Some("jwt"), None) => Err("this namespace takes no Entra ID tokens".to_string()),
        _ => check_policy_token(node, &token),
    };
    match checked {
        Ok(expiry) => {
            auth.until.fetch_max(expiry, Ordering::Relaxed);
            (respond(request, 202, "Accepted", Value::Null), None)
        }
        Err(reason) => (
            respond(
                request,
                401,
                &format!("Unauthorized: {reason}"),
                Value::Null,
            ),
            Some("cbs_unauthorized"),
        ),
    }
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut map = OrderedMap::new();
    for (k, v) in entries {
        map.insert(Value::String(k.to_owned()), v);
    }
    Value::Map(map)
}

/// Answers a `$management` request. Returns the response and whether it was refused.
pub(crate) fn management(
    node: &Node<'_>,
    auth: &ConnectionAuth,
    request: &Message<Body<Value>>,
) -> (Response, Option<&'static str>) {
    let token_ok =
        app_string(request, "security_token").is_some_and(|t| check_policy_token(node, &t).is_ok());
    if !auth.is_authorized() && !token_ok {
        return (
            respond(
                request,
                401,
                "Unauthorized: put a token on $cbs first",
                Value::Null,
            ),
            Some("management_unauthorized"),
        );
    }
    if app_string(request, "operation").as_deref() != Some("READ") {
        return (
            respond(request, 400, "only READ is supported", Value::Null),
            Some("management_operation"),
        );
    }
    let name = app_string(request, "name").unwrap_or_default();
    if !name.eq_ignore_ascii_case(node.hub) {
        return (
            respond(request, 404, &format!("no event hub `{name}`"), Value::Null),
            Some("management_not_found"),
        );
    }
    match app_string(request, "type").as_deref() {
        Some("com.microsoft:eventhub") => {
            let ids: Vec<Value> = (0..node.partitions.count())
                .map(|i| Value::String(i.to_string()))
                .collect();
            let body = map(vec![
                ("name", Value::String(node.hub.to_owned())),
                (
                    "created_at",
                    Value::Timestamp(Timestamp::from_milliseconds(node.created_ms)),
                ),
                (
                    "partition_count",
                    Value::Int(node.partitions.count() as i32),
                ),
                // An AMQP array of strings, as the service sends it (the Rust SDK accepts
                // nothing else; the Python SDK also takes a list).
                ("partition_ids", Value::Array(Array::from(ids))),
            ]);
            (respond(request, 200, "OK", body), None)
        }
        Some("com.microsoft:partition") => {
            let id = app_string(request, "partition").unwrap_or_default();
            let Some(partition) = id
                .parse::<usize>()
                .ok()
                .and_then(|i| node.partitions.get(i))
            else {
                return (
                    respond(request, 404, &format!("no partition `{id}`"), Value::Null),
                    Some("management_not_found"),
                );
            };
            let info = partition.info();
            let body = map(vec![
                ("name", Value::String(node.hub.to_owned())),
                ("type", Value::String("com.microsoft:partition".into())),
                ("partition", Value::String(id)),
                (
                    "begin_sequence_number",
                    Value::Long(info.begin_sequence_number),
                ),
                (
                    "last_enqueued_sequence_number",
                    Value::Long(info.last_sequence_number),
                ),
                (
                    "last_enqueued_offset",
                    Value::String(info.last_offset.to_string()),
                ),
                (
                    "last_enqueued_time_utc",
                    Value::Timestamp(Timestamp::from_milliseconds(info.last_enqueued_ms)),
                ),
                ("is_partition_empty", Value::Bool(info.is_empty())),
                // The service sends the geo-replication epochs to clients that declare
                // `com.microsoft:georeplication` (the Rust SDK does, and refuses an answer
                // without them); this hub has no replication: -1.
                ("begin_sequence_number_epoch", Value::Long(-1)),
                ("last_enqueued_sequence_number_epoch", Value::Long(-1)),
            ]);
            (respond(request, 200, "OK", body), None)
        }
        other => (
            respond(
                request,
                400,
                &format!("unknown type {other:?}"),
                Value::Null,
            ),
            Some("management_type"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partitions::{Incoming, Retention};
    use crate::sas::make_token;

    fn request(props: &[(&str, &str)], body: Value) -> Message<Body<Value>> {
        let mut app = ApplicationProperties::builder();
        for (k, v) in props {
            app = app.insert(*k, SimpleValue::String((*v).into()));
        }
        Message::builder()
            .properties(Properties {
                message_id: Some(7u64.into()),
                ..Properties::default()
            })
            .application_properties(app.build())
            .body(Body::Value(fe2o3_amqp::types::messaging::AmqpValue(body)))
            .build()
    }

    fn status(response: &Response) -> i32 {
        match response
            .application_properties
            .as_ref()
            .unwrap()
            .0
            .get("status-code")
        {
            Some(SimpleValue::Int(code)) => *code,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn put_token_authorizes_only_with_the_policy_key() {
        let parts = Partitions::new(2, Retention::default());
        let node = Node {
            hub: "hub",
            key: "secret",
            entra: None,
            partitions: &parts,
            created_ms: 0,
        };
        let auth = ConnectionAuth::default();
        let expiry = now_secs() + 600;
        let wrong = make_token("sb://h:5672/hub", b"other", expiry, Some("service"));
        let put = |token: String| request(&[("operation", "put-token")], Value::String(token));
        let (response, refused) = cbs(&node, &auth, &put(wrong)).await;
        assert_eq!(
            (status(&response), refused),
            (401, Some("cbs_unauthorized"))
        );
        assert!(!auth.is_authorized());
        let read = request(
            &[
                ("operation", "READ"),
                ("name", "hub"),
                ("type", "com.microsoft:eventhub"),
            ],
            Value::Null,
        );
        assert_eq!(status(&management(&node, &auth, &read).0), 401);
        let other_hub = make_token("sb://h:5672/other", b"secret", expiry, Some("service"));
        assert_eq!(status(&cbs(&node, &auth, &put(other_hub)).await.0), 401);
        let good = make_token("sb://h:5672/hub", b"secret", expiry, Some("service"));
        let (response, refused) = cbs(&node, &auth, &put(good)).await;
        assert_eq!((status(&response), refused), (202, None));
        assert_eq!(
            response.properties.unwrap().correlation_id,
            Some(7u64.into())
        );
        assert!(auth.is_authorized());
        assert_eq!(status(&management(&node, &auth, &read).0), 200);
    }

    #[test]
    fn partition_reads_report_sequence_numbers() {
        let parts = Partitions::new(2, Retention::default());
        parts.append_to(1, Incoming::new("d", "abc"));
        let node = Node {
            hub: "hub",
            key: "k",
            entra: None,
            partitions: &parts,
            created_ms: 0,
        };
        let auth = ConnectionAuth::default();
        auth.until.store(u64::MAX, Ordering::Relaxed);
        let read = |p: &str| {
            let r = request(
                &[
                    ("operation", "READ"),
                    ("name", "hub"),
                    ("type", "com.microsoft:partition"),
                    ("partition", p),
                ],
                Value::Null,
            );
            management(&node, &auth, &r).0
        };
        let body = read("1").body.0;
        let Value::Map(map) = body else { panic!() };
        assert_eq!(
            map.get(&Value::String("last_enqueued_sequence_number".into())),
            Some(&Value::Long(0))
        );
        assert_eq!(
            map.get(&Value::String("is_partition_empty".into())),
            Some(&Value::Bool(false))
        );
        assert_eq!(
            map.get(&Value::String("last_enqueued_sequence_number_epoch".into())),
            Some(&Value::Long(-1))
        );
        assert_eq!(status(&read("9")), 404);
    }
}

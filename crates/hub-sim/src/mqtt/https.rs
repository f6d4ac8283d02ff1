//! The hub's HTTPS port (IoT Hub's 443): MQTT over WebSockets at `/$iothub/websocket`
//! (upgraded and handed to [`crate::mqtt::session`]), and the service REST API for twins
//! and methods, authorised by a SAS token of the `iothubowner` or `service` policy:
//!
//! | method and path | body | answer |
//! | --- | --- | --- |
//! | `GET /twins/{id}` | | the twin |
//! | `PATCH /twins/{id}` (`If-Match`: etag or `*`) | `{"tags", "properties": {"desired"}}` merge patch | the twin; 412 on another etag |
//! | `PUT /twins/{id}` (`If-Match`) | the same, replacing desired and tags | the twin |
//! | `POST /twins/{id}/methods` | `{"methodName", "payload", "responseTimeoutInSeconds", "connectTimeoutInSeconds"}` | `{"status", "payload"}` |
//!
//! Errors carry IoT Hub's body `{"Message": "{\"errorCode\":...}", "ExceptionMessage": ""}`
//! and its `iothub-errorcode` header (DeviceNotFound 404001, DeviceNotOnline 404103,
//! DeviceConnectionClosedRemotely 404104,
//! GatewayTimeout 504101, PreconditionFailed 412001, ArgumentInvalid 400004, ...).

use crate::dps::service::Dps;
use crate::hub::Hub;
use crate::hub::twin::methods::{self, MethodError, MethodTimeouts};
use crate::hub::twin::store::{TwinError, timestamp_now};
use crate::sas::{SasToken, normalise_resource, now_secs};
use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::tungstenite::handshake::derive_accept_key;
use async_tungstenite::tungstenite::protocol::Role;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, UPGRADE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use percent_encoding::percent_decode_str;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use ws_stream_tungstenite::WsStream;

/// The path IoT Hub serves MQTT over WebSockets on.
pub const WEBSOCKET_PATH: &str = "/$iothub/websocket";
/// The largest request body read.
const MAX_BODY: usize = 256 * 1024;
/// How long a client has to send a request's headers, and then its body.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the HTTPS port serves.
pub(crate) struct Https {
    pub(crate) hub: Arc<Hub>,
    pub(crate) dps: Arc<Dps>,
    /// The `iothubowner` and `service` policies' keys, decoded (both grant ServiceConnect:
    /// twins and methods).
    pub(crate) policy_keys: Vec<(&'static str, Vec<u8>)>,
    pub(crate) stop: CancellationToken,
}

/// Serves one TLS connection of the HTTPS port; `chain` is the client's certificate chain.
pub(crate) async fn serve<S>(https: Arc<Https>, stream: S, chain: Vec<Vec<u8>>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let chain = Arc::new(chain);
    let service = service_fn(move |request| {
        let https = https.clone();
        let chain = chain.clone();
        async move { Ok::<_, Infallible>(route(https, request, chain).await) }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
}

fn reply(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("valid response")
}

/// An error as IoT Hub's service answers it.
fn error(
    status: StatusCode,
    name: &str,
    code: u32,
    message: &str,
    info: Value,
) -> Response<Full<Bytes>> {
    let tracking_id = uuid::Uuid::new_v4().simple().to_string();
    let inner = json!({
        "errorCode": code,
        "trackingId": tracking_id,
        "message": message,
        "info": info,
        "timestampUtc": timestamp_now(),
    });
    let mut response = reply(
        status,
        &json!({ "Message": inner.to_string(), "ExceptionMessage": "" }),
    );
    if let Ok(value) = HeaderValue::from_str(name) {
        response.headers_mut().insert("iothub-errorcode", value);
    }
    response
}

fn bad_request(message: &str) -> Response<Full<Bytes>> {
    error(
        StatusCode::BAD_REQUEST,
        "ArgumentInvalid",
        400_004,
        message,
        json!({}),
    )
}

/// `hh:mm:ss`, as IoT Hub's errors give timeouts.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Whether the request carries a valid token of the `iothubowner` or `service` policy for
/// this hub.
fn authorised(https: &Https, request: &Request<Incoming>) -> bool {
    let Some(token) = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| SasToken::parse(v).ok())
    else {
        return false;
    };
    let host = normalise_resource(&https.hub.host);
    let resource = normalise_resource(&token.resource);
    let for_hub = resource == host || resource.starts_with(&format!("{host}/"));
    let key = https
        .policy_keys
        .iter()
        .find(|(name, _)| token.key_name.as_deref() == Some(*name));
    for_hub && key.is_some_and(|(_, key)| token.verify(&[key], now_secs()).is_ok())
}

async fn route(
    https: Arc<Https>,
    request: Request<Incoming>,
    chain: Arc<Vec<Vec<u8>>>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    if path == WEBSOCKET_PATH {
        return upgrade(https, request, chain);
    }
    if !authorised(&https, &request) {
        return error(
            StatusCode::UNAUTHORIZED,
            "IotHubUnauthorizedAccess",
            401_002,
            "Unauthorized: a SharedAccessSignature of the iothubowner or service policy is required",
            json!({}),
        );
    }
    let Some(rest) = path.strip_prefix("/twins/") else {
        return error(
            StatusCode::NOT_FOUND,
            "NotFound",
            404_000,
            &format!("no route {path}"),
            json!({}),
        );
    };
    let (id, methods) = match rest.strip_suffix("/methods") {
        Some(id) => (id, true),
        None => (rest.trim_end_matches('/'), false),
    };
    let Ok(device) = percent_decode_str(id).decode_utf8() else {
        return bad_request("the device id is not URL-encoded UTF-8");
    };
    let device = device.into_owned();
    let method = request.method().clone();
    let etag = request
        .headers()
        .get("if-match")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match tokio::time::timeout(
        REQUEST_TIMEOUT,
        Limited::new(request.into_body(), MAX_BODY).collect(),
    )
    .await
    {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(_)) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "MessageTooLarge",
                413_001,
                &format!("the request body is over {MAX_BODY} bytes"),
                json!({}),
            );
        }
        Err(_) => return bad_request("the request body did not arrive in time"),
    };
    let hub = &https.hub;
    match (method, methods) {
        (Method::POST, true) => invoke(hub, &device, &body).await,
        (Method::GET, false) => match crate::hub::twin::service_view(hub, &device) {
            Some(twin) => {
                hub.counters.add("twin_operations", "service_get", 1);
                reply(StatusCode::OK, &twin)
            }
            None => not_found(&device),
        },
        (m @ (Method::PATCH | Method::PUT), false) => {
            let twin: Value = match serde_json::from_slice(&body) {
                Ok(Value::Object(twin)) => Value::Object(twin),
                _ => return bad_request("the body is not a JSON twin"),
            };
            let desired = twin["properties"]["desired"].as_object();
            let tags = twin["tags"].as_object();
            let replace = m == Method::PUT;
            let empty = Map::new();
            // A replacement names the whole of desired and tags: what it leaves out goes.
            let (desired, tags) = match replace {
                true => (desired.or(Some(&empty)), tags.or(Some(&empty))),
                false => (desired, tags),
            };
            match crate::hub::twin::update(hub, &device, desired, tags, etag.as_deref(), replace) {
                Ok(_) => match crate::hub::twin::service_view(hub, &device) {
                    Some(twin) => reply(StatusCode::OK, &twin),
                    None => not_found(&device),
                },
                Err(TwinError::DeviceNotFound(_)) => not_found(&device),
                Err(e @ TwinError::EtagMismatch { .. }) => error(
                    StatusCode::PRECONDITION_FAILED,
                    "PreconditionFailed",
                    412_001,
                    &e.to_string(),
                    json!({}),
                ),
                Err(TwinError::State(e)) => error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "ServerError",
                    500_001,
                    &e.to_string(),
                    json!({}),
                ),
                Err(e) => bad_request(&e.to_string()),
            }
        }
        (m, _) => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "InvalidOperation",
            405_000,
            &format!("{m} is not served on {path}"),
            json!({}),
        ),
    }
}

fn not_found(device: &str) -> Response<Full<Bytes>> {
    error(
        StatusCode::NOT_FOUND,
        "DeviceNotFound",
        404_001,
        &format!("Device {device} not registered"),
        json!({}),
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Invocation {
    method_name: String,
    #[serde(default)]
    payload: Value,
    response_timeout_in_seconds: Option<u64>,
    connect_timeout_in_seconds: Option<u64>,
}

async fn invoke(hub: &Hub, device: &str, body: &[u8]) -> Response<Full<Bytes>> {
    let call: Invocation = match serde_json::from_slice(body) {
        Ok(call) => call,
        Err(e) => {
            return bad_request(&format!(
                "expected {{\"methodName\", \"payload\", ...}}: {e}"
            ));
        }
    };
    let defaults = MethodTimeouts::default();
    let timeouts = MethodTimeouts {
        response: call
            .response_timeout_in_seconds
            .map_or(defaults.response, Duration::from_secs),
        connect: call
            .connect_timeout_in_seconds
            .map_or(defaults.connect, Duration::from_secs),
    };
    match methods::invoke(hub, device, &call.method_name, &call.payload, timeouts).await {
        Ok(answer) => reply(
            StatusCode::OK,
            &json!({ "status": answer.status, "payload": answer.payload }),
        ),
        Err(MethodError::DeviceNotFound) => not_found(device),
        Err(e @ MethodError::DeviceNotOnline(timeout)) => error(
            StatusCode::NOT_FOUND,
            "DeviceNotOnline",
            404_103,
            &e.to_string(),
            json!({ "timeout": span(timeout) }),
        ),
        Err(e @ MethodError::GatewayTimeout(timeout)) => error(
            StatusCode::GATEWAY_TIMEOUT,
            "GatewayTimeout",
            504_101,
            &e.to_string(),
            json!({ "timeout": span(timeout) }),
        ),
        Err(e @ MethodError::DeviceConnectionClosed) => error(
            StatusCode::NOT_FOUND,
            "DeviceConnectionClosedRemotely",
            404_104,
            &e.to_string(),
            json!({}),
        ),
        Err(e @ MethodError::Throttled) => error(
            StatusCode::TOO_MANY_REQUESTS,
            "ThrottlingException",
            429_001,
            &e.to_string(),
            json!({}),
        ),
        Err(e) => bad_request(&e.to_string()),
    }
}

/// Upgrades a request for `/$iothub/websocket` (subprotocol `mqtt`) and serves the device
/// session on it.
fn upgrade(
    https: Arc<Https>,
    request: Request<Incoming>,
    chain: Arc<Vec<Vec<u8>>>,
) -> Response<Full<Bytes>> {
    let headers = request.headers();
    let is_websocket = headers
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = headers.get("sec-websocket-key").filter(|_| is_websocket) else {
        https
            .hub
            .counters
            .add("connections_refused", "websocket_handshake", 1);
        return bad_request(&format!("{WEBSOCKET_PATH} takes WebSocket upgrades only"));
    };
    let accept = derive_accept_key(key.as_bytes());
    let offers_mqtt = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("mqtt"));
    let mut response = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", accept);
    if offers_mqtt {
        response = response.header("sec-websocket-protocol", "mqtt");
    }
    tokio::spawn(async move {
        let upgraded = tokio::select! {
            _ = https.stop.cancelled() => return,
            upgraded = hyper::upgrade::on(request) => upgraded,
        };
        let Ok(upgraded) = upgraded else {
            https
                .hub
                .counters
                .add("connections_refused", "websocket_handshake", 1);
            return;
        };
        let io = TokioAdapter::new(TokioIo::new(upgraded));
        let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
        let chain = Arc::unwrap_or_clone(chain);
        tokio::select! {
            _ = https.stop.cancelled() => {}
            _ = super::session::serve(https.hub.clone(), https.dps.clone(), WsStream::new(ws), chain) => {}
        }
    });
    response
        .body(Full::new(Bytes::new()))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_as_iot_hub_writes_them() {
        assert_eq!(span(Duration::ZERO), "00:00:00");
        assert_eq!(span(Duration::from_secs(60)), "00:01:00");
        assert_eq!(span(Duration::from_secs(3725)), "01:02:05");
    }
}

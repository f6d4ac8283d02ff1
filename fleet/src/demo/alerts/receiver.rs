//! The demo's webhook receiver: an HTTP server on a free local port that takes the
//! alerter's CloudEvents as a receiver should. It checks the media type (structured mode)
//! and the `X-Alert-Signature-256` HMAC over the bytes received, in constant time, refusing
//! what fails (400), and records each event by its id: how many times it arrived, and
//! whether a repeat carried different content.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The path the alerter posts to.
const PATH: &str = "/alerts";
/// The media type of a structured-mode CloudEvent, as the alerter sends it.
const STRUCTURED: &str = "application/cloudevents+json; charset=utf-8";

/// One id's arrivals.
#[derive(Debug, Clone)]
pub(super) struct Arrival {
    /// The event as it first arrived.
    pub(super) event: Value,
    /// Times it arrived.
    pub(super) times: u64,
    /// Whether a repeat differed from the first.
    pub(super) differed: bool,
}

/// What the receiver took.
#[derive(Debug, Default)]
pub(super) struct Received {
    /// Ids in the order they first arrived.
    pub(super) order: Vec<String>,
    /// Each id's arrivals.
    pub(super) by_id: BTreeMap<String, Arrival>,
    /// Requests refused.
    pub(super) refused: u64,
}

#[derive(Clone)]
struct Shared {
    secret: Arc<Vec<u8>>,
    received: Arc<Mutex<Received>>,
}

/// The receiver, served until dropped.
pub(super) struct Receiver {
    url: String,
    shared: Shared,
    stop: CancellationToken,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Receiver {
    /// Serves on a free port of 127.0.0.1, checking signatures made with `secret`.
    pub(super) async fn start(secret: &str) -> std::io::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let url = format!("http://{}{PATH}", listener.local_addr()?);
        let shared = Shared {
            secret: Arc::new(secret.as_bytes().to_vec()),
            received: Arc::default(),
        };
        let app = axum::Router::new()
            .route(PATH, post(receive))
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "the webhook receiver stopped");
            }
        });
        Ok(Receiver { url, shared, stop })
    }

    /// Its URL.
    pub(super) fn url(&self) -> &str {
        &self.url
    }

    /// Reads what it took so far.
    pub(super) fn read<T>(&self, f: impl FnOnce(&Received) -> T) -> T {
        f(&self.shared.received.lock().expect("never poisoned"))
    }
}

impl Received {
    /// The distinct silent alerts of `device`.
    pub(super) fn silent_of(&self, device: &str) -> u64 {
        self.by_id
            .values()
            .filter(|a| {
                a.event["data"]["alert"] == "silent" && a.event["data"]["deviceId"] == device
            })
            .count() as u64
    }
}

async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let expected = alerter::signature(&shared.secret, &body);
    let signed = header(alerter::SIGNATURE_HEADER)
        .is_some_and(|given| same(given.as_bytes(), expected.as_bytes()));
    let event = serde_json::from_slice::<Value>(&body).ok();
    let id = event
        .as_ref()
        .and_then(|e| e["id"].as_str())
        .map(str::to_owned);
    let mut received = shared.received.lock().expect("never poisoned");
    let (true, true, Some(event), Some(id)) = (
        signed,
        header("content-type") == Some(STRUCTURED),
        event,
        id,
    ) else {
        received.refused += 1;
        return StatusCode::BAD_REQUEST;
    };
    match received.by_id.get_mut(&id) {
        Some(arrival) => {
            arrival.times += 1;
            arrival.differed |= arrival.event != event;
        }
        None => {
            received.order.push(id.clone());
            received.by_id.insert(
                id,
                Arrival {
                    event,
                    times: 1,
                    differed: false,
                },
            );
        }
    }
    StatusCode::OK
}

/// Whether `a` and `b` are equal, in time that depends on their lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn signed_events_are_recorded_by_id_and_anything_else_is_refused() {
        let receiver = Receiver::start("key").await.unwrap();
        let http = reqwest::Client::new();
        let post = |body: &'static str, signature: Option<String>| {
            let mut request = http
                .post(receiver.url())
                .header("content-type", STRUCTURED)
                .body(body);
            if let Some(signature) = signature {
                request = request.header(alerter::SIGNATURE_HEADER, signature);
            }
            request.send()
        };
        let sign = |body: &str| Some(alerter::signature(b"key", body.as_bytes()));
        let one = r#"{"id":"a","data":{"alert":"silent","deviceId":"d1"}}"#;
        let other = r#"{"id":"a","data":{"alert":"silent","deviceId":"d2"}}"#;
        for (body, signature, status) in [
            (one, sign(one), 200),
            (one, sign(one), 200),
            (other, sign(other), 200),
            (one, None, 400),
            (one, sign(other), 400),
            ("not json", sign("not json"), 400),
        ] {
            let answer = post(body, signature).await.unwrap();
            assert_eq!(answer.status().as_u16(), status, "{body}");
        }
        receiver.read(|r| {
            assert_eq!(r.order, ["a"]);
            assert_eq!(r.by_id["a"].times, 3);
            assert!(r.by_id["a"].differed);
            assert_eq!(r.refused, 3);
            assert_eq!(r.silent_of("d1"), 1);
        });
    }
}

//! Ids from the path and what reaches Cosmos DB: `.` and `..` (spelt plain or
//! percent-encoded) answer 400 on every route that takes an id, and no request reaches the
//! endpoint for them (seen by a recording proxy in front of `cosmos-sim`, not by the API's
//! own client). A Cosmos DB failure answers a body without the account's URL, which the log
//! holds.
//!
//! Requests go over raw HTTP/1.1: an HTTP client would fold `/api/drones/..` onto `/api/`
//! before sending it, as a hostile client does not.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use axum::response::Response;
use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::{Access, AccessConfig, ApiKeys, Role, key_line};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ADMIN_KEY: &str = "admin-key-0123456789-0123456789-0123456789";

/// The requests a recording proxy forwarded: `METHOD target`, as the proxy received them.
type Seen = Arc<Mutex<Vec<String>>>;

/// A proxy on a free port that records every request and forwards it to `upstream`; its
/// base URL.
async fn recording_proxy(upstream: &str) -> (String, Seen) {
    let seen = Seen::default();
    let upstream = upstream.trim_end_matches('/').to_string();
    let http = reqwest::Client::new();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |request: Request| {
        let (record, http, upstream) = (record.clone(), http.clone(), upstream.clone());
        async move {
            let (parts, body) = request.into_parts();
            let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            record
                .lock()
                .unwrap()
                .push(format!("{} {target}", parts.method));
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let mut headers = parts.headers.clone();
            headers.remove(header::HOST);
            let answer = http
                .request(parts.method, format!("{upstream}{target}"))
                .headers(headers)
                .body(body)
                .send()
                .await
                .unwrap();
            let mut response = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if name != header::TRANSFER_ENCODING && name != header::CONTENT_LENGTH {
                    response = response.header(name, value);
                }
            }
            response
                .body(Body::from(answer.bytes().await.unwrap()))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

/// Sends `method target` as written, with the admin key; the status and JSON body.
async fn raw(base: &str, method: &str, target: &str) -> (u16, Value) {
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {ADMIN_KEY}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

async fn admin_access() -> Access {
    let keys = ApiKeys::parse(&key_line("ops", Role::Admin, ADMIN_KEY).unwrap()).unwrap();
    Access::start(AccessConfig {
        keys,
        oidc: None,
        anonymous: false,
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_ids_answer_400_and_reach_no_cosmos_resource() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let sim = CosmosSim::unthrottled().await.unwrap();
        let (proxy, seen) = recording_proxy(&sim.endpoint()).await;
        let cosmos = client(&proxy, sim.key());
        let c = container(&cosmos, "positions").await;
        seed_latest(&c, &[HOME]).await;
        let (base, _stop) = serve_with(c, ApiOptions::default(), admin_access().await).await;
        let square = json!({"type": "Polygon", "coordinates": [[[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]]});
        let put = reqwest::Client::new()
            .put(format!("{base}/api/geofences/zone-a"))
            .header("X-API-Key", ADMIN_KEY)
            .json(&square)
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 201);

        let before = seen.lock().unwrap().len();
        for id in [".", "..", "%2e", "%2e%2e", "%2E.", ".%2E"] {
            for (method, target) in [
                ("GET", format!("/api/drones/{id}")),
                ("GET", format!("/api/drones/{id}/track")),
                ("GET", format!("/api/geofences/{id}")),
                ("PUT", format!("/api/geofences/{id}")),
                ("DELETE", format!("/api/geofences/{id}")),
            ] {
                let (status, body) = raw(&base, method, &target).await;
                assert_eq!(status, 400, "{method} {target}: {body}");
                assert_eq!(body["error"], "bad_request", "{method} {target}");
                assert!(
                    body["message"].as_str().unwrap().contains("neither . nor .."),
                    "{body}"
                );
            }
        }
        let after: Vec<String> = seen.lock().unwrap()[before..].to_vec();
        assert_eq!(after, Vec::<String>::new(), "requests reached Cosmos DB");

        // The proxy does see what is asked: a good id reaches the fence's document.
        let (status, body) = raw(&base, "GET", "/api/geofences/zone-a").await;
        assert_eq!(status, 200, "{body}");
        let after: Vec<String> = seen.lock().unwrap()[before..].to_vec();
        assert!(
            after.iter().any(|r| r.ends_with("/docs/zone-a")),
            "{after:?}"
        );
        let fences = cosmos.container("telemetry", "geofences");
        fences.properties().await.expect("the fences' container is there");
    })
    .await
    .expect("test timed out");
}

/// Log lines written to memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The server runs on this test's one thread, so its log goes to the subscriber set here.
#[tokio::test(flavor = "current_thread")]
async fn a_cosmos_failure_answers_without_the_account_url() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer({
            let captured = captured.clone();
            move || captured.clone()
        })
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    tokio::time::timeout(Duration::from_secs(120), async {
        let sim = CosmosSim::unthrottled().await.unwrap();
        let cosmos = client(&sim.endpoint(), sim.key());
        let c = container(&cosmos, "positions").await;
        let (base, _stop) = serve_with(c, ApiOptions::default(), admin_access().await).await;
        let account = sim.endpoint();
        let host = account.trim_start_matches("http://").trim_end_matches('/');
        // Every request answered 503 (retried, then given up): a service error whose
        // message and the client's error name the endpoint.
        sim.set_error_rate_503(1.0);
        for target in [
            "/api/drones/drone-1",
            "/api/geofences/zone-a",
            "/api/drones",
        ] {
            let (status, body) = raw(&base, "GET", target).await;
            assert_eq!(status, 502, "{target}: {body}");
            let text = body.to_string();
            assert!(!text.contains(host), "{target}: {text}");
            assert!(!text.contains("503"), "{target}: {text}");
            assert_eq!(body["error"], "cosmos", "{target}");
            assert!(text.contains("try again later"), "{target}: {text}");
        }
        // Nothing listening: a transport error, whose text is the request's URL.
        drop(sim);
        let (status, body) = raw(&base, "GET", "/api/drones/drone-1").await;
        assert_eq!(status, 502, "{body}");
        assert!(!body.to_string().contains(host), "{body}");
        // The detail is the operator's: in the log.
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(
            log.contains(host),
            "the log lacks the failed request's address: {log}"
        );
    })
    .await
    .expect("test timed out");
}

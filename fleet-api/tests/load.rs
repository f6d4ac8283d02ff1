//! A misbehaving caller with a valid key, against the local Cosmos endpoint: bodies trickled
//! a byte a second hold no fan-out slot (another key's `near` still answers) and are answered
//! 408 after `API_BODY_TIMEOUT`; one caller's fan-outs are capped apart from another's; an
//! answer not begun within `API_REQUEST_TIMEOUT` is given up (503); a
//! connection that never finishes its headers is closed after `API_HEADER_TIMEOUT`; and
//! connections past `API_MAX_CONNECTIONS` are closed until one is freed.

mod common;

use std::time::{Duration, Instant};

use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::Serving;
use fleet_api::{Access, AccessConfig, ApiKeys, Role, key_line};
use test_harness::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(180);

/// The keys of callers `a` and `b`.
const KEY_A: &str = "a-key-0123456789abcdef0123456789abcdef";
const KEY_B: &str = "b-key-0123456789abcdef0123456789abcdef";

async fn two_keys() -> Access {
    let lines = [("a", KEY_A), ("b", KEY_B)]
        .map(|(name, key)| key_line(name, Role::Read, key).unwrap())
        .join("\n");
    Access::start(AccessConfig {
        keys: ApiKeys::parse(&lines).unwrap(),
        oidc: None,
        anonymous: false,
    })
    .await
    .unwrap()
}

/// A fleet of `n` drones on `partitions` ranges.
async fn fleet(n: usize, partitions: usize) -> (CosmosSim, cosmos::ContainerClient) {
    let sim = CosmosSim::builder()
        .partitions(partitions)
        .start()
        .await
        .unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    seed_latest(&c, &scatter(n, 0x5eed)).await;
    (sim, c)
}

/// A near query as `key`: its status.
async fn near(base: &str, key: &str) -> u16 {
    near_response(base, key).await.status().as_u16()
}

/// The answer to a `near` query around the fleet with `key`.
async fn near_response(base: &str, key: &str) -> reqwest::Response {
    let url = format!(
        "{base}/api/drones/near?lat={}&lon={}&radius_m=3000",
        HOME.1, HOME.0
    );
    let request = reqwest::Client::new().get(url).header("X-API-Key", key);
    request.send().await.unwrap()
}

async fn connect(base: &str) -> TcpStream {
    TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads `stream` until the server closes it; what it wrote before.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// `GET /healthz` on `stream`, kept alive: whether it was answered 200.
async fn healthz(stream: &mut TcpStream) -> bool {
    let asked = stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: api\r\n\r\n")
        .await;
    if asked.is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).ends_with("ok\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_trickled_by_one_key_leave_another_keys_near_answering() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, c) = fleet(200, 4).await;
        // One caller may take every slot: only reading bodies before a slot keeps them free.
        let options = ApiOptions {
            max_concurrent_queries_per_identity: 16,
            ..ApiOptions::default()
        };
        let (base, _stop) = serve_with(c, options, two_keys().await).await;
        let polygon = format!(
            r#"{{"type":"Polygon","coordinates":[[[{w},{s}],[{e},{s}],[{e},{n}],[{w},{n}],[{w},{s}]]]}}"#,
            w = HOME.0 - 0.02,
            e = HOME.0 + 0.02,
            s = HOME.1 - 0.02,
            n = HOME.1 + 0.02,
        );
        let mut answers = Vec::new();
        let mut bodies = Vec::new();
        for _ in 0..16 {
            let (read, mut write) = connect(&base).await.into_split();
            let head = format!(
                "POST /api/drones/within HTTP/1.1\r\nhost: api\r\nx-api-key: {KEY_A}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                polygon.len()
            );
            write.write_all(head.as_bytes()).await.unwrap();
            answers.push(read);
            bodies.push(write);
        }
        // The bodies, one byte a second each, never the last: the pace is the attack here,
        // not a wait for something.
        let (first_round, mut sent) = tokio::sync::watch::channel(false);
        let bytes = polygon.clone().into_bytes();
        let trickle = tokio::spawn(async move {
            for byte in &bytes[..bytes.len() - 1] {
                for body in &mut bodies {
                    let _ = body.write_all(&[*byte]).await;
                }
                first_round.send_replace(true);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        sent.wait_for(|sent| *sent).await.unwrap();

        // Key B's near queries answer while key A's bodies trickle in.
        for _ in 0..5 {
            let asked = Instant::now();
            let status = tokio::time::timeout(Duration::from_secs(3), near(&base, KEY_B))
                .await
                .expect("key B's near query answers within 3 s");
            assert_eq!(status, 200, "key B's near query after {:?}", asked.elapsed());
        }
        // Key A's requests are still waiting for their bodies, each on its connection...
        for answer in &answers {
            let mut buf = [0u8; 16];
            assert!(
                matches!(answer.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
                "a trickled request was answered before its body was in"
            );
        }
        // ...until API_BODY_TIMEOUT (10 s) gives them up: 408.
        for mut answer in answers {
            let mut got = String::new();
            answer.read_to_string(&mut got).await.unwrap();
            assert!(got.starts_with("HTTP/1.1 408"), "{got}");
            assert!(got.contains("body_timeout"), "{got}");
        }
        trickle.abort();
    })
    .await
    .expect("the test finishes within its limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_callers_fan_outs_are_capped_apart_from_anothers() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, c) = fleet(20, 1).await;
        let options = ApiOptions {
            max_concurrent_queries_per_identity: 2,
            ..ApiOptions::default()
        };
        let (base, _stop) = serve_with(c, options, two_keys().await).await;
        // Once to learn the ranges; then every query is one call, held 5 s by the endpoint.
        assert_eq!(near(&base, KEY_A).await, 200);
        let before = sim.delayed_requests();
        sim.set_latency(Duration::from_secs(5));
        let held: Vec<_> = (0..2)
            .map(|_| {
                let base = base.clone();
                tokio::spawn(async move { near(&base, KEY_A).await })
            })
            .collect();
        eventually(
            "two reads held by Cosmos DB",
            Duration::from_secs(30),
            || async { sim.delayed_requests() >= before + 2 },
            |ok| *ok,
        )
        .await;
        // A third of A's: refused at once, before Cosmos DB is asked.
        let response = near_response(&base, KEY_A).await;
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "1");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"], "too_many_at_once", "{body}");
        assert_eq!(sim.delayed_requests(), before + 2);
        // B's is let in, and answered once the endpoint is.
        assert_eq!(near(&base, KEY_B).await, 200);
        for query in held {
            assert_eq!(query.await.unwrap(), 200);
        }
    })
    .await
    .expect("the test finishes within its limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_finishes_its_headers_is_closed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, c) = fleet(3, 1).await;
        let serving = Serving {
            header_timeout: Duration::from_secs(1),
            ..Serving::default()
        };
        let (base, _stop) =
            serve_limited(c, ApiOptions::default(), two_keys().await, serving).await;
        let started = Instant::now();
        // One that sends nothing, one that stops within its headers.
        let mut silent = connect(&base).await;
        let mut partial = connect(&base).await;
        partial
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: api\r\nx-trickle: ")
            .await
            .unwrap();
        // One that asks and then idles on its kept-alive connection.
        let mut idle = connect(&base).await;
        assert!(healthz(&mut idle).await);
        for stream in [&mut silent, &mut partial, &mut idle] {
            let got = until_closed(stream).await;
            assert!(!got.contains("200 OK"), "{got}");
        }
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "closed before API_HEADER_TIMEOUT"
        );
        // A client that sends its request is served.
        assert!(healthz(&mut connect(&base).await).await);
    })
    .await
    .expect("the test finishes within its limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed_until_one_is_freed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (_sim, c) = fleet(3, 1).await;
        let serving = Serving {
            max_connections: 2,
            header_timeout: Duration::from_secs(60),
            ..Serving::default()
        };
        let (base, _stop) =
            serve_limited(c, ApiOptions::default(), two_keys().await, serving).await;
        let mut first = connect(&base).await;
        let mut second = connect(&base).await;
        assert!(healthz(&mut first).await);
        assert!(healthz(&mut second).await);
        // Both kept alive: a third is closed unanswered.
        let mut third = connect(&base).await;
        assert!(
            !healthz(&mut third).await,
            "a connection past the cap was served"
        );
        assert_eq!(until_closed(&mut third).await, "");
        // One closed: a new connection is served (once the server has seen the close).
        drop(first);
        eventually(
            "a new connection served",
            Duration::from_secs(30),
            || async { healthz(&mut connect(&base).await).await },
            |ok| *ok,
        )
        .await;
        assert!(
            healthz(&mut second).await,
            "the kept connection still serves"
        );
    })
    .await
    .expect("the test finishes within its limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_not_begun_within_the_request_timeout_is_given_up() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (sim, c) = fleet(20, 1).await;
        let options = ApiOptions {
            request_timeout: Duration::from_secs(1),
            ..ApiOptions::default()
        };
        let (base, _stop) = serve_with(c, options, two_keys().await).await;
        sim.set_latency(Duration::from_secs(10));
        let response = near_response(&base, KEY_A).await;
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "1");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"], "timeout", "{body}");
    })
    .await
    .expect("the test finishes within its limit");
}

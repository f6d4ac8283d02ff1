//! Live streams under load, against the local Cosmos endpoint: 300 viewers of a fleet of
//! 1,000 drones that never read are dropped after `API_STREAM_STALL` and counted, while the
//! API (the binary, whose resident memory is printed) keeps answering; the snapshot, written in pieces, is still one FeatureCollection; one
//! caller's streams are capped apart from another's.

mod common;

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use common::binary::start_binary;
use common::sse::Viewer;
use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::{Access, AccessConfig, ApiKeys, Role, key_line};
use socket2::{Domain, Socket, Type};
use test_harness::eventually;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(300);

/// A viewer that asks for the stream and never reads, with a small receive window and
/// segments (as over a network rather than loopback's 64 KB ones), so that the server's
/// writes to it stall.
fn silent_viewer(addr: SocketAddr) -> std::net::TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.set_mss(1200).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut stream: std::net::TcpStream = socket.into();
    stream
        .write_all(b"GET /api/drones/stream HTTP/1.1\r\nhost: api\r\n\r\n")
        .unwrap();
    stream
}

/// The sum of the metric lines that start with `prefix` and contain `part`.
async fn metric(base: &str, prefix: &str, part: &str) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(part))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The resident memory of process `pid`, from `/proc/PID/status`.
fn rss(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.trim_start_matches("VmRSS:").trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_viewers_are_dropped_after_the_stall_while_the_api_answers() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::unthrottled().await.unwrap();
        let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        seed_latest(&c, &scatter(1000, 0xf1ee7)).await;
        // All from this host's one address, each snapshot charged: no budget or cap per caller.
        let api = start_binary(
            &sim,
            &[
                ("API_ALLOW_ANONYMOUS", "true"),
                ("API_STREAM_STALL", "5s"),
                ("API_STREAM_MAX_CLIENTS_PER_IDENTITY", "1000"),
                ("API_RU_PER_SEC_PER_IDENTITY", "off"),
            ],
        );
        let base = api.base.clone();
        let pid = api.child.id();
        let addr: SocketAddr = base.trim_start_matches("http://").parse().unwrap();

        // A viewer that reads gets the whole fleet as one FeatureCollection.
        let mut reader = Viewer::open(&base, None).await;
        let snapshot = reader.next().await;
        assert_eq!(snapshot.name, "snapshot");
        assert_eq!(snapshot.data["type"], "FeatureCollection");
        assert_eq!(snapshot.data["features"].as_array().unwrap().len(), 1000);

        let before = rss(pid);
        let silent: Vec<_> = (0..300).map(|_| silent_viewer(addr)).collect();
        eventually("301 streams open", Duration::from_secs(120), || async {
            let open = metric(
                &base,
                "fleet_api_requests_by_role_total{route=\"/api/drones/stream\"",
                "status=\"200\"",
            )
            .await;
            open >= 301.0
        }, |ok| *ok)
        .await;
        eprintln!(
            "fleet-api's VmRSS: {before} with one viewer, {} with 300 silent viewers of 1,000 drones",
            rss(pid)
        );
        // The API answers while they are open.
        let near = format!(
            "{base}/api/drones/near?lat={}&lon={}&radius_m=3000",
            HOME.1, HOME.0
        );
        assert_eq!(get(&near).await.status, 200);
        assert_eq!(get(&format!("{base}/api/drones")).await.status, 200);

        // Each is dropped after the stall, and counted.
        eventually("300 silent streams dropped", Duration::from_secs(120), || async {
            metric(&base, "fleet_api_stream_stalled_total", "").await >= 300.0
        }, |ok| *ok)
        .await;
        eprintln!("fleet-api's VmRSS once they were dropped: {}", rss(pid));
        // The reader, which took its writes, is still served.
        move_drone_on(&sim, "drone-7").await;
        assert_eq!(reader.next().await.data["id"], "drone-7");
        drop(silent);
    })
    .await
    .expect("the test finishes within its limit");
}

/// Moves `device` through the endpoint's own container client.
async fn move_drone_on(sim: &CosmosSim, device: &str) {
    let c = client(&sim.endpoint(), sim.key()).container("telemetry", "positions");
    move_drone(&c, device, 999, (HOME.0 + 0.001, HOME.1)).await;
}

const KEY_A: &str = "a-key-0123456789abcdef0123456789abcdef";
const KEY_B: &str = "b-key-0123456789abcdef0123456789abcdef";

/// Opens the stream as `key`: the response (kept open while it is held).
async fn open_as(base: &str, key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{base}/api/drones/stream"))
        .header("X-API-Key", key)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_callers_streams_are_capped_apart_from_anothers() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::unthrottled().await.unwrap();
        let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        seed_latest(&c, &scatter(5, 9)).await;
        let lines = [("a", KEY_A), ("b", KEY_B)]
            .map(|(name, key)| key_line(name, Role::Read, key).unwrap())
            .join("\n");
        let access = Access::start(AccessConfig {
            keys: ApiKeys::parse(&lines).unwrap(),
            oidc: None,
            anonymous: false,
        })
        .await
        .unwrap();
        let options = ApiOptions {
            stream_max_clients_per_identity: 2,
            ..ApiOptions::default()
        };
        let (base, _stop) = serve_with(c, options, access).await;
        let first = open_as(&base, KEY_A).await;
        let second = open_as(&base, KEY_A).await;
        assert_eq!(
            (first.status(), second.status()),
            (reqwest::StatusCode::OK, reqwest::StatusCode::OK)
        );
        let third = open_as(&base, KEY_A).await;
        assert_eq!(third.status(), 429);
        let body: serde_json::Value = third.json().await.unwrap();
        assert_eq!(body["error"], "too_many_streams", "{body}");
        let other = open_as(&base, KEY_B).await;
        assert_eq!(other.status(), 200, "another key has streams of its own");
        let refused = metric(&base, "fleet_api_refused_total", "caller_streams").await;
        assert_eq!(refused, 1.0);
    })
    .await
    .expect("the test finishes within its limit");
}

//! Shared by the API's tests: a fleet of position documents written as the writer writes
//! them (latest and history documents, `telemetry::DocumentLayout`), the API served on a
//! free port, and an independent check of spatial answers over the stored documents.

#![allow(dead_code)]

pub mod binary;
pub mod sse;
pub mod track;

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cosmos::{ContainerClient, ContainerSetup, CosmosClient, CosmosConfig, Credential, MasterKey};
use fleet_api::Access;
use fleet_api::ApiOptions;
use fleet_api::Serving;
use serde_json::Value;
use telemetry::{DocumentLayout, Position};
use tokio_util::sync::CancellationToken;

/// The centre of the test fleet (Redmond).
pub const HOME: (f64, f64) = (-122.12, 47.66);

/// A client of `endpoint` with `key`.
pub fn client(endpoint: &str, key: &str) -> CosmosClient {
    let mut config = CosmosConfig::new(
        endpoint.parse().unwrap(),
        Credential::MasterKey(MasterKey::from_base64(key).unwrap()),
    );
    config.accept_invalid_certs = true;
    config.request_timeout = Duration::from_secs(30);
    CosmosClient::new(config).unwrap()
}

/// Creates the database and a container keyed on `/deviceId` with the project's indexing
/// policy, as the writer creates it.
pub async fn container(client: &CosmosClient, name: &str) -> ContainerClient {
    container_with(
        client,
        name,
        ContainerSetup::new("/deviceId").with_indexing_policy(telemetry::indexing_policy()),
    )
    .await
}

/// Creates the database and a container keyed on `/deviceId` with Cosmos DB's default
/// indexing policy (every path) and a spatial index on `/location`.
pub async fn container_indexing_everything(client: &CosmosClient, name: &str) -> ContainerClient {
    container_with(
        client,
        name,
        ContainerSetup {
            location_path: Some("/location".into()),
            ..ContainerSetup::new("/deviceId")
        },
    )
    .await
}

async fn container_with(
    client: &CosmosClient,
    name: &str,
    setup: ContainerSetup,
) -> ContainerClient {
    let container = client.container("telemetry", name);
    container.create_if_missing(&setup).await.unwrap();
    container
}

/// Deterministic points scattered within about 6 km of [`HOME`].
pub fn scatter(n: usize, seed: u64) -> Vec<(f64, f64)> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 1_000_000) as f64 / 1_000_000.0
    };
    (0..n)
        .map(|_| {
            (
                HOME.0 + (next() - 0.5) * 0.16,
                HOME.1 + (next() - 0.5) * 0.10,
            )
        })
        .collect()
}

/// A position of `device` at `(lon, lat)`, `age` ago.
pub fn position(device: &str, seq: u64, (lon, lat): (f64, f64), age: Duration) -> Position {
    Position {
        device_id: device.to_string(),
        seq,
        ts: Utc::now() - chrono::Duration::from_std(age).unwrap(),
        lat,
        lon,
        alt_m: Some(100.0),
        heading_deg: Some(90.0),
        speed_mps: Some(10.0),
        battery_pct: Some(80),
        gnss: Default::default(),
    }
}

/// Writes the latest document of each drone `drone-{i}` at `points[i]`; returns the
/// stored documents.
pub async fn seed_latest(container: &ContainerClient, points: &[(f64, f64)]) -> Vec<Value> {
    let layout = DocumentLayout::default();
    let mut docs = Vec::new();
    for (i, p) in points.iter().enumerate() {
        let pos = position(
            &format!("drone-{i}"),
            10,
            *p,
            Duration::from_secs(i as u64 * 53 % 900),
        );
        let doc = layout.latest(&pos, None);
        container
            .upsert(pos.device_id.as_str(), &serde_json::to_vec(&doc).unwrap())
            .await
            .unwrap();
        docs.push(doc);
    }
    docs
}

/// Writes the latest document of `device` at `seq` and `at`, as the writer does when the
/// drone reports from there now.
pub async fn move_drone(c: &ContainerClient, device: &str, seq: u64, at: (f64, f64)) {
    let pos = position(device, seq, at, Duration::ZERO);
    let doc = DocumentLayout::default().latest(&pos, None);
    c.upsert(device, &serde_json::to_vec(&doc).unwrap())
        .await
        .unwrap();
}

/// Writes a circular geofence `id` of `radius_m` around `centre` into the geofences container
/// of the test database (created when missing), as `PUT /api/geofences/{id}` stores it.
pub async fn put_circle_fence(cosmos: &CosmosClient, id: &str, centre: (f64, f64), radius_m: f64) {
    let fences = cosmos.container("telemetry", "geofences");
    fences
        .create_if_missing(&ContainerSetup::new("/id"))
        .await
        .unwrap();
    let fence = serde_json::json!({
        "id": id, "kind": "geofence",
        "geometry": {"type": "Point", "coordinates": [centre.0, centre.1]},
        "properties": {"subType": "Circle", "radius": radius_m},
    });
    fences
        .upsert(id, &serde_json::to_vec(&fence).unwrap())
        .await
        .unwrap();
}

/// Writes `n` history documents of `device`, one a minute, the newest 30 s ago, on a
/// curve that ends at `end`; returns their device times, oldest first.
pub async fn seed_history(
    container: &ContainerClient,
    device: &str,
    n: u64,
    end: (f64, f64),
) -> Vec<DateTime<Utc>> {
    let layout = DocumentLayout::default();
    let mut times = Vec::new();
    for seq in 1..=n {
        let age = Duration::from_secs(60 * (n - seq + 1) - 30);
        let back = (n - seq) as f64;
        let p = (end.0 - back * 0.0008, end.1 - (back * 0.15).sin() * 0.01);
        let pos = position(device, seq, p, age);
        times.push(pos.ts);
        let doc = layout.history(&pos, None, None);
        container
            .upsert(device, &serde_json::to_vec(&doc).unwrap())
            .await
            .unwrap();
    }
    times
}

/// The API over `container`, open to anonymous readers, served on a free port of
/// 127.0.0.1; its base URL.
pub async fn serve(container: ContainerClient, options: ApiOptions) -> (String, CancellationToken) {
    serve_with(container, options, Access::anonymous()).await
}

/// The API over `container`, letting callers in by `access`, served on a free port of
/// 127.0.0.1; its base URL.
pub async fn serve_with(
    container: ContainerClient,
    options: ApiOptions,
    access: Access,
) -> (String, CancellationToken) {
    serve_limited(container, options, access, Serving::default()).await
}

/// The API over `container`, letting callers in by `access`, its connections held to
/// `serving`, served on a free port of 127.0.0.1; its base URL.
pub async fn serve_limited(
    container: ContainerClient,
    options: ApiOptions,
    access: Access,
    serving: Serving,
) -> (String, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let router = fleet_api::router(container, options, access);
    tokio::spawn(fleet_api::serve_within(
        listener,
        router,
        serving,
        None,
        stop.clone(),
    ));
    (base, stop)
}

/// An answer of the API: status, body, and the cost headers.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub body: Value,
    pub charge: f64,
    pub calls: u32,
    pub throttled: u32,
    pub parallelism: usize,
}

fn header<T: std::str::FromStr + Default>(r: &reqwest::Response, name: &str) -> T {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

async fn read(r: reqwest::Response) -> Got {
    let status = r.status().as_u16();
    let (charge, calls, throttled, parallelism) = (
        header(&r, "x-query-request-charge"),
        header(&r, "x-query-calls"),
        header(&r, "x-query-throttled"),
        header(&r, "x-query-parallelism"),
    );
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Got {
        status,
        body,
        charge,
        calls,
        throttled,
        parallelism,
    }
}

/// GET `url`.
pub async fn get(url: &str) -> Got {
    read(reqwest::get(url).await.unwrap()).await
}

/// POST `body` to `url`.
pub async fn post(url: &str, body: impl Into<reqwest::Body>) -> Got {
    read(
        reqwest::Client::new()
            .post(url)
            .body(body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// The device ids of a FeatureCollection, in its order.
pub fn ids(collection: &Value) -> Vec<String> {
    collection["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

/// Great-circle distance in metres, written apart from the one behind the endpoints'
/// answers, so that the tests do not check that code against itself.
pub fn haversine(a: (f64, f64), b: (f64, f64)) -> f64 {
    test_harness::geo::independent_haversine_m(a, b)
}

/// Whether `p` is inside the ring (even-odd rule over edge crossings, counted by winding
/// the other way round from the endpoints': crossings of a ray to the west).
pub fn inside(p: (f64, f64), ring: &[(f64, f64)]) -> bool {
    let mut crossings = 0;
    for w in ring.windows(2) {
        let ((x1, y1), (x2, y2)) = (w[0], w[1]);
        if (y1 <= p.1) != (y2 <= p.1) {
            let x = x1 + (p.1 - y1) * (x2 - x1) / (y2 - y1);
            if x < p.0 {
                crossings += 1;
            }
        }
    }
    crossings % 2 == 1
}

/// The point of a stored document, `(lon, lat)`.
pub fn point_of(doc: &Value) -> (f64, f64) {
    let c = &doc["location"]["coordinates"];
    (c[0].as_f64().unwrap(), c[1].as_f64().unwrap())
}

/// The device ids of `docs` for which `keep` holds, sorted.
pub fn expected(docs: &[Value], keep: impl Fn((f64, f64)) -> bool) -> BTreeSet<String> {
    docs.iter()
        .filter(|d| keep(point_of(d)))
        .map(|d| d["deviceId"].as_str().unwrap().to_string())
        .collect()
}

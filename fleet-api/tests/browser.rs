//! The map in Debian's `chromium` (headless), loaded from a running `fleet-api` binary over
//! the local Cosmos endpoint: after the first update the page has drawn exactly as many
//! drones as the API returns, reading anonymously, or after signing in at the local Entra ID
//! issuer (`entra-sim`) with the authorization code flow and PKCE where only signed-in users
//! may read (these two poll, `MAP_UPDATES=poll`: `--dump-dom` reads the page once its
//! requests are answered, which a stream never is); and, driven by puppeteer-core, a drone's dot moves within 2 s of the write of
//! its new position, from the live stream, without one polling request. Chromium must be
//! installed (`./scripts/test-all` installs it); without it these tests fail and say how to
//! install it.
//!
//! The drones are dots on one canvas: the page says how many it drew (`data-drawn`), and its
//! `fleetMap` hooks tell each dot's state and place. The map tells three drones apart by their
//! link: connected with a fresh position (`current`), connected without a position for a
//! minute (`silent`: no fix), and disconnected.
//!
//! Over a local tile server, the map asks for exactly the tiles that cover the view at the zoom
//! it shows (by the slippy-map formula, computed here), shows the attribution and loads
//! nothing from another origin. 10,000 drones are drawn, and 2,000 moves applied, within a
//! bound (`docs/performance.md`).
//!
//! `FLEET_MAP_SCREENSHOT=docs/img/fleet-map.png` also saves a screenshot of the map, with a
//! drone and its track selected and a radius query drawn (how the README's picture is made).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::binary::{Running, start_binary};
use common::*;
use cosmos_sim::CosmosSim;
use entra_sim::{App, EntraSim, User};
use serde_json::Value;
use test_harness::Chromium;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// Starts the binary with `access` (the settings of who may read), the map polling every
/// 500 ms.
fn start_map(sim: &CosmosSim, access: &[(&str, &str)]) -> Running {
    let mut settings = vec![("MAP_REFRESH", "500ms")];
    settings.extend_from_slice(access);
    start_binary(sim, &settings)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_map_draws_every_drone_the_api_returns() {
    let chromium = Chromium::find().unwrap_or_else(|e| {
        panic!("the map test needs Debian's chromium: {e} (./scripts/test-all installs it)")
    });
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let points = scatter(75, 0xb10b);
    seed_latest(&c, &points).await;
    seed_history(&c, "drone-3", 40, points[3]).await;
    seed_alerts(&sim).await;
    let api = start_map(
        &sim,
        &[("API_ALLOW_ANONYMOUS", "true"), ("MAP_UPDATES", "poll")],
    );

    let listed = get(&format!("{}/api/drones", api.base)).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let expected = ids(&listed.body).len();
    assert_eq!(expected, 75);

    let url = format!("{}/", api.base);
    let budget = Duration::from_secs(3);
    let dom = tokio::task::spawn_blocking({
        let chromium = chromium.clone();
        let url = url.clone();
        move || chromium.dump_dom(&url, budget)
    })
    .await
    .unwrap()
    .unwrap();
    assert!(
        dom.contains("data-updated="),
        "the page did not finish its first update: {dom}"
    );
    assert!(
        dom.contains(&format!("data-drawn=\"{expected}\"")),
        "drones drawn on the map vs {expected} returned by the API: {dom}"
    );
    for shown in [
        "drone-7 north-fence enter 2026-11-22T09:15:02.500Z",
        "drone-9 silent silent 2026-11-22T09:16:00.000Z",
    ] {
        assert!(dom.contains(shown), "the alert list lacks {shown:?}: {dom}");
    }
    assert!(
        dom.contains("No base map is configured"),
        "the map does not say it has no base map: {dom}"
    );

    if let Some(path) = std::env::var_os("FLEET_MAP_SCREENSHOT") {
        let shot = format!(
            "{}/?select=drone-3&near={},{},2500",
            api.base, HOME.1, HOME.0
        );
        tokio::task::spawn_blocking(move || {
            chromium.screenshot(&shot, std::path::Path::new(&path), (1280, 800), budget)
        })
        .await
        .unwrap()
        .unwrap();
    }
    drop(api);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_map_tells_current_silent_and_disconnected_drones_apart() {
    let chromium = Chromium::find().unwrap_or_else(|e| {
        panic!("the map test needs Debian's chromium: {e} (./scripts/test-all installs it)")
    });
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let layout = telemetry::DocumentLayout::default();
    // (device, position age, agent connected), as the writer stores them.
    let drones = [
        ("drone-current", 2, true),
        ("drone-silent", 300, true),
        ("drone-gone", 600, false),
    ];
    for (i, (device, age_s, connected)) in drones.into_iter().enumerate() {
        let at = (HOME.0 + i as f64 * 0.002, HOME.1);
        let pos = position(device, 5, at, Duration::from_secs(age_s));
        let mut doc = layout.latest(&pos, None);
        doc["agentConnected"] = serde_json::json!(connected);
        doc["agentConnectionSeq"] = serde_json::json!("01");
        c.upsert(device, &serde_json::to_vec(&doc).unwrap())
            .await
            .unwrap();
    }
    let api = start_map(
        &sim,
        &[("API_ALLOW_ANONYMOUS", "true"), ("MAP_UPDATES", "poll")],
    );
    let mut map = LiveMap::open(&chromium, &format!("{}/", api.base), "drone-gone");
    map.next("drawn").await;
    map.send("drones").await;
    let drawn = map.next("drones").await;
    for (device, state) in [
        ("drone-current", "current"),
        ("drone-silent", "silent"),
        ("drone-gone", "disconnected"),
    ] {
        let dot = drawn["drones"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["id"] == device)
            .unwrap_or_else(|| panic!("{device} not drawn: {drawn}"));
        assert_eq!(dot["state"], state, "{device}: {dot}");
    }
    map.send("end").await;
    map.next("requests").await;
    drop(api);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_map_signs_in_with_pkce_and_draws_the_fleet() {
    let chromium = Chromium::find().unwrap_or_else(|e| {
        panic!("the map test needs Debian's chromium: {e} (./scripts/test-all installs it)")
    });
    let entra = EntraSim::builder()
        .app(
            App::new("fleet-api-id")
                .app_id_uri("api://fleet-api")
                .scope("Fleet.Read")
                .app_role("Fleet.Read"),
        )
        .app(
            App::new("fleet-map")
                .public_client()
                .redirect_uri("http://127.0.0.1/"),
        )
        .user(User::new("pilot@fleet.test").role("api://fleet-api", "Fleet.Read"))
        .start()
        .await
        .unwrap();
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    seed_latest(&c, &scatter(40, 0x5157)).await;
    let issuer = entra.issuer();
    let api = start_map(
        &sim,
        &[
            ("API_OIDC_ISSUER", issuer.as_str()),
            ("API_OIDC_AUDIENCE", "api://fleet-api"),
            ("API_MAP_CLIENT_ID", "fleet-map"),
            ("MAP_UPDATES", "poll"),
        ],
    );
    // Without a token the API refuses: what the map draws, it read signed in.
    let anonymous = get(&format!("{}/api/drones", api.base)).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);

    let url = format!("{}/", api.base);
    let dom = tokio::task::spawn_blocking(move || chromium.dump_dom(&url, Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert!(
        dom.contains("data-updated="),
        "the page did not finish its first update: {dom}"
    );
    assert!(dom.contains("data-drawn=\"40\""), "{dom}");
    drop(api);
    sim.shutdown().await;
}

/// `tests/browser/live_map.mjs` driving chromium on the map at `url`, watching `drone`.
struct LiveMap {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl LiveMap {
    fn open(chromium: &Chromium, url: &str, drone: &str) -> LiveMap {
        let node = test_harness::node_bin()
            .expect("node and tools/node packages (npm ci --prefix tools/node)");
        let mut child = tokio::process::Command::new(node)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/browser/live_map.mjs"
            ))
            .arg(chromium.bin())
            .arg(url)
            .arg(drone)
            .arg(test_harness::node_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        LiveMap { child, lines }
    }

    /// The driver's next line, which must hold `key`.
    async fn next(&mut self, key: &str) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(90), self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no {key} from the browser within 90 s"))
            .unwrap()
            .unwrap_or_else(|| {
                panic!("the browser driver ended before {key} (its error is above)")
            });
        let value: Value = serde_json::from_str(&line).unwrap();
        assert!(value.get(key).is_some(), "{key} expected: {line}");
        value
    }

    async fn send(&mut self, command: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drone_moves_on_the_map_within_two_seconds_of_its_write_without_polling() {
    let chromium = Chromium::find().unwrap_or_else(|e| {
        panic!("the map test needs Debian's chromium: {e} (./scripts/test-all installs it)")
    });
    let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
    let cosmos = client(&sim.endpoint(), sim.key());
    let c = container(&cosmos, "positions").await;
    let points = scatter(40, 0x11fe);
    seed_latest(&c, &points).await;
    // The third move ends at the fence's centre, the fourth 220 m away: one enter, one leave.
    let fenced = (points[7].0 + 0.009, points[7].1);
    put_circle_fence(&cosmos, "depot", fenced, 150.0).await;
    // MAP_REFRESH is short: a page that polled would ask for the fleet several times a second.
    let api = start_map(&sim, &[("API_ALLOW_ANONYMOUS", "true")]);
    let mut map = LiveMap::open(&chromium, &format!("{}/", api.base), "drone-7");
    map.next("drawn").await;

    let mut took = Vec::new();
    for step in 1..=5u32 {
        let to = (points[7].0 + 0.003 * f64::from(step), points[7].1);
        let written = Instant::now();
        move_drone(&c, "drone-7", 100 + u64::from(step), to).await;
        map.send("moved").await;
        map.next("moved").await;
        took.push(written.elapsed());
    }
    map.send("crossings").await;
    let listed = map.next("crossings").await;
    assert_eq!(
        listed["fences"],
        serde_json::json!(["depot"]),
        "the fences the map draws"
    );
    assert_eq!(
        listed["crossings"],
        serde_json::json!([["drone-7", "leave", "depot"], ["drone-7", "enter", "depot"]]),
        "the crossings the map lists, newest first"
    );
    map.send("end").await;
    let requests = map.next("requests").await;
    let requests: Vec<&str> = requests["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    eprintln!("write to dot moved: {took:?}");
    for t in &took {
        assert!(
            *t < Duration::from_secs(2),
            "a dot moved {t:?} after its write (all: {took:?})"
        );
    }
    assert!(
        requests.contains(&"/api/drones/stream"),
        "the page did not open the stream: {requests:?}"
    );
    assert!(
        !requests.contains(&"/api/drones"),
        "the page polled the fleet: {requests:?}"
    );
    drop(api);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_click_selects_a_drone_and_its_track_a_click_or_shift_drag_asks_a_radius() {
    let chromium = Chromium::find().unwrap_or_else(|e| {
        panic!("the map test needs Debian's chromium: {e} (./scripts/test-all installs it)")
    });
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let points = scatter(20, 0xc11c);
    seed_latest(&c, &points).await;
    seed_history(&c, "drone-2", 10, points[2]).await;
    // Pages of 4: the map follows three pages to draw the 10 positions.
    let api = start_map(
        &sim,
        &[("API_ALLOW_ANONYMOUS", "true"), ("TRACK_PAGE_LIMIT", "4")],
    );
    let mut map = LiveMap::open(&chromium, &format!("{}/", api.base), "drone-2");
    map.next("drawn").await;

    map.send("click drone-2").await;
    let clicked = map.next("clicked").await;
    assert_eq!(clicked["clicked"]["detail"], "drone-2", "{clicked}");
    assert_eq!(clicked["clicked"]["track"], true, "{clicked}");
    assert_eq!(clicked["clicked"]["trackPoints"], 10, "{clicked}");
    assert_eq!(clicked["clicked"]["trackPages"], 3, "{clicked}");

    // The map's lower right corner, away from the fleet (fitted with a margin).
    map.send("query 960 780").await;
    let query = map.next("query").await;
    assert!(
        query["query"].as_str().unwrap().contains("within 1000 m"),
        "{query}"
    );

    map.send("drag drone-2 drone-5").await;
    let query = map.next("query").await;
    let text = query["query"].as_str().unwrap();
    let radius: f64 = text
        .split(" within ")
        .nth(1)
        .and_then(|rest| rest.split(" m").next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no radius in {text}"));
    let apart = haversine(points[2], points[5]);
    assert!(
        (radius - apart).abs() < 0.03 * apart + 5.0,
        "dragged {radius} m between drones {apart:.0} m apart: {text}"
    );
    map.send("end").await;
    map.next("requests").await;
    drop(api);
    sim.shutdown().await;
}

/// Two alert records as the alerter stores them in its lease container (`alert-leases`,
/// keyed on `/id`): the CloudEvent it delivered, with its outcome.
async fn seed_alerts(sim: &CosmosSim) {
    let leases = client(&sim.endpoint(), sim.key()).container("telemetry", "alert-leases");
    leases
        .create_if_missing(&cosmos::ContainerSetup::new("/id"))
        .await
        .unwrap();
    let alerts = [
        (
            "a1",
            "drone-7",
            "north-fence",
            "enter",
            "2026-11-22T09:15:02.500Z",
            1,
        ),
        (
            "a2",
            "drone-9",
            "silent",
            "silent",
            "2026-11-22T09:16:00.000Z",
            2,
        ),
    ];
    for (id, drone, rule, alert, at, recorded) in alerts {
        let doc = serde_json::json!({
            "id": format!("alert.{id}"), "kind": "alert", "outcome": "delivered",
            "recordedAtMs": recorded, "ttl": 604800,
            "event": {"specversion": "1.0", "id": id, "type": "drone.alert", "source": "alerter",
                "data": {"deviceId": drone, "rule": rule, "alert": alert, "deviceTime": at,
                    "location": {"type": "Point", "coordinates": [HOME.0, HOME.1]}}},
        });
        let id = format!("alert.{id}");
        leases
            .upsert(id.as_str(), &serde_json::to_vec(&doc).unwrap())
            .await
            .unwrap();
    }
}

/// A tile server on a free port: a small PNG for every path, each path recorded.
async fn tile_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::sync::{Arc, Mutex};
    // A 1×1 grey PNG.
    const PNG: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a,
        0x7e, 0x9b, 0x55, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x38,
        0x01, 0x00, 0x00, 0xca, 0x00, 0xc9, 0x34, 0x42, 0x27, 0xf3, 0x00, 0x00, 0x00, 0x00, 0x49,
        0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new().fallback({
        let seen = seen.clone();
        move |uri: axum::http::Uri| async move {
            seen.lock().unwrap().push(uri.path().to_string());
            ([(axum::http::header::CONTENT_TYPE, "image/png")], PNG)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

/// The slippy-map tile (x, y) holding `(lon, lat)` at zoom `z`.
fn tile_of((lon, lat): (f64, f64), z: u32) -> (i64, i64) {
    let n = f64::from(1u32 << z);
    let phi = lat.to_radians();
    let x = ((lon + 180.0) / 360.0 * n).floor() as i64;
    let y = ((1.0 - (phi.tan() + 1.0 / phi.cos()).ln() / std::f64::consts::PI) / 2.0 * n).floor()
        as i64;
    (x, y)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_map_asks_for_the_tiles_of_its_view_shows_their_attribution_and_nothing_else() {
    let chromium = Chromium::find().unwrap_or_else(|e| {
        panic!("the map test needs Debian's chromium: {e} (./scripts/test-all installs it)")
    });
    let (tiles, seen) = tile_server().await;
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    let points = scatter(30, 0x7e1e);
    seed_latest(&c, &points).await;
    let template = format!("{tiles}/tiles/{{z}}/{{x}}/{{y}}.png");
    let api = start_map(
        &sim,
        &[
            ("API_ALLOW_ANONYMOUS", "true"),
            ("MAP_TILE_URL", template.as_str()),
            ("MAP_TILE_ATTRIBUTION", "© Test Tiles"),
        ],
    );
    let mut map = LiveMap::open(&chromium, &format!("{}/", api.base), "drone-0");
    map.next("drawn").await;
    map.send("tiles").await;
    let shown = map.next("tiles").await["tiles"].clone();
    map.send("end").await;
    let urls = map.next("requests").await["urls"].clone();

    let view = &shown["view"];
    let z = view["zoom"].as_u64().expect("a whole zoom") as u32;
    let corner = |lon: &str, lat: &str| {
        tile_of(
            (view[lon].as_f64().unwrap(), view[lat].as_f64().unwrap()),
            z,
        )
    };
    let ((west, north), (east, south)) = (corner("west", "north"), corner("east", "south"));
    let expected: std::collections::BTreeSet<String> = (west..=east)
        .flat_map(|x| (north..=south).map(move |y| format!("/tiles/{z}/{x}/{y}.png")))
        .collect();
    let asked: std::collections::BTreeSet<String> = seen.lock().unwrap().iter().cloned().collect();
    eprintln!("{} tiles at zoom {z} for the view {view}", asked.len());
    assert_eq!(asked, expected, "tiles asked vs covering the view {view}");
    for p in &points {
        let (x, y) = tile_of(*p, z);
        assert!(
            asked.contains(&format!("/tiles/{z}/{x}/{y}.png")),
            "the tile of the drone at {p:?} was not asked for"
        );
    }
    assert!(
        shown["attribution"]
            .as_str()
            .unwrap()
            .contains("© Test Tiles"),
        "attribution shown: {}",
        shown["attribution"]
    );
    let resources = shown["resources"].as_array().unwrap();
    for url in urls.as_array().unwrap().iter().chain(resources) {
        let url = url.as_str().unwrap();
        assert!(
            url.starts_with(&format!("{}/", api.base)) || url.starts_with(&format!("{tiles}/")),
            "the page loaded {url}, from neither the API nor the tile server"
        );
    }
    drop(api);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_drones_are_drawn_and_a_second_of_moves_applied_within_bounds() {
    let chromium = Chromium::find().unwrap_or_else(|e| {
        panic!("the map test needs Debian's chromium: {e} (./scripts/test-all installs it)")
    });
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    seed_latest(&c, &scatter(5, 0x10_000)).await;
    let api = start_map(&sim, &[("API_ALLOW_ANONYMOUS", "true")]);
    let mut map = LiveMap::open(&chromium, &format!("{}/", api.base), "drone-0");
    map.next("drawn").await;
    map.send("perf 10000 2000").await;
    let perf = map.next("perf").await["perf"].clone();
    map.send("end").await;
    map.next("requests").await;
    eprintln!("10,000 drones: {perf}");
    assert_eq!(perf["drawn"], 10_000, "{perf}");
    // Bounds: several times what an idle 2-core machine measures (docs/performance.md).
    let draw_ms = perf["drawMs"].as_f64().unwrap();
    let moves_ms = perf["movesMs"].as_f64().unwrap();
    assert!(draw_ms < DRAW_BOUND_MS, "first draw took {draw_ms} ms");
    assert!(moves_ms < MOVES_BOUND_MS, "2,000 moves took {moves_ms} ms");
    drop(api);
    sim.shutdown().await;
}

/// The bound on drawing 10,000 drones, ms.
const DRAW_BOUND_MS: f64 = 5000.0;
/// The bound on applying 2,000 moves to them, until the frame that shows them, ms.
const MOVES_BOUND_MS: f64 = 2000.0;

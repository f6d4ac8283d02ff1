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
//! The map also tells three drones apart by their link (`data-state`): connected with a fresh
//! position (`current`), connected without a position for a minute (`silent`: no fix), and
//! disconnected.
//!
//! `FLEET_MAP_SCREENSHOT=docs/img/fleet-map.png` also saves a screenshot of the map, with a
//! drone and its track selected and a radius query drawn (how the README's picture is made).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use cosmos_sim::CosmosSim;
use entra_sim::{App, EntraSim, User};
use serde_json::Value;
use test_harness::Chromium;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The `fleet-api` binary, killed when dropped.
struct Running {
    child: Child,
    base: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary on a free port with `access` (the settings of who may read) and reads
/// the address it prints.
fn start_binary(sim: &CosmosSim, access: &[(&str, &str)]) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleet-api"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("COSMOS_ENDPOINT", sim.endpoint())
        .env("COSMOS_KEY", sim.key())
        .env("API_ADDR", "127.0.0.1:0")
        .env("MAP_REFRESH", "500ms")
        .envs(access.iter().copied())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the fleet-api binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("fleet-api: listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .trim_end_matches('/')
        .to_string();
    Running { child, base }
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
    let api = start_binary(
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
    let drawn = dom.matches("data-drone-id=").count();
    assert_eq!(
        drawn, expected,
        "drones drawn on the map vs returned by the API"
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
    let api = start_binary(
        &sim,
        &[("API_ALLOW_ANONYMOUS", "true"), ("MAP_UPDATES", "poll")],
    );
    let url = format!("{}/", api.base);
    let dom = tokio::task::spawn_blocking(move || chromium.dump_dom(&url, Duration::from_secs(3)))
        .await
        .unwrap()
        .unwrap();
    assert!(dom.contains("data-updated="), "no first update: {dom}");
    for (device, state) in [
        ("drone-current", "current"),
        ("drone-silent", "silent"),
        ("drone-gone", "disconnected"),
    ] {
        let at = dom
            .find(&format!("data-drone-id=\"{device}\""))
            .unwrap_or_else(|| panic!("{device} not drawn: {dom}"));
        let tag_start = dom[..at].rfind('<').unwrap();
        let tag = &dom[tag_start..at + dom[at..].find('>').unwrap()];
        assert!(
            tag.contains(&format!("data-state=\"{state}\"")),
            "{device} should be {state}: {tag}"
        );
    }
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
    let api = start_binary(
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
    assert_eq!(dom.matches("data-drone-id=").count(), 40, "{dom}");
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
    let api = start_binary(&sim, &[("API_ALLOW_ANONYMOUS", "true")]);
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

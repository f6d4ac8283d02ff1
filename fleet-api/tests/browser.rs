//! The map in Debian's `chromium` (headless), loaded from a running `fleet-api` binary over
//! the local Cosmos endpoint: after the first update the page has drawn exactly as many
//! drones as the API returns, reading anonymously, or after signing in at the local Entra ID
//! issuer (`entra-sim`) with the authorization code flow and PKCE where only signed-in users
//! may read. Chromium must be installed (`./scripts/test-all` installs it); without it these
//! tests fail and say how to install it.
//!
//! `FLEET_MAP_SCREENSHOT=docs/img/fleet-map.png` also saves a screenshot of the map, with a
//! drone and its track selected and a radius query drawn (how the README's picture is made).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use cosmos_sim::CosmosSim;
use entra_sim::{App, EntraSim, User};
use test_harness::Chromium;

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
    let api = start_binary(&sim, &[("API_ALLOW_ANONYMOUS", "true")]);

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

//! API keys and anonymous access, from the outside: the `hash-key` line checked against
//! coreutils' `sha256sum`, the binary refusing a configuration that lets nobody in, and the
//! API over the local Cosmos endpoint answering 401, 403 and 200 by credential, with
//! `/healthz` and `/metrics` open.

mod common;

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::{Access, AccessConfig, ApiKeys};

const READER_KEY: &str = "l7TQx1bq0mB1yYx6yC0ZpXl9a3c6YgkRr2m4nq8h1ZA=";

/// The binary with only `env` (and PATH), `stdin` written to it; bounded by 30 s.
fn run_binary(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleet-api"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    wait.recv_timeout(Duration::from_secs(30))
        .expect("fleet-api exits within 30 s")
        .unwrap()
}

/// `sha256sum` of `text`, in hex.
fn sha256sum(text: &str) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("coreutils' sha256sum runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
    out.split_whitespace().next().unwrap().to_string()
}

#[test]
fn hash_key_prints_the_line_of_the_key_on_standard_input() {
    let out = run_binary(
        &["hash-key", "ci", "Fleet.Read"],
        &[("COSMOS_ENDPOINT", "http://127.0.0.1:1")],
        &format!("{READER_KEY}\n"),
    );
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        line.trim_end(),
        format!("ci Fleet.Read {}", sha256sum(READER_KEY))
    );
    let short = run_binary(&["hash-key", "ci", "Fleet.Read"], &[], "secret\n");
    assert!(!short.status.success());
    let said = String::from_utf8_lossy(&short.stderr);
    assert!(said.contains("openssl rand"), "{said}");
    assert!(!said.contains("secret"), "the key shows: {said}");
}

#[test]
fn a_configuration_that_lets_nobody_in_stops_with_exit_2() {
    let out = run_binary(
        &[],
        &[
            ("COSMOS_ENDPOINT", "http://127.0.0.1:1"),
            ("COSMOS_KEY", "a2V5"),
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("API_KEYS_FILE") && said.contains("API_ALLOW_ANONYMOUS=true"),
        "{said}"
    );
}

async fn get_with(url: &str, key: Option<&str>) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(key) = key {
        request = request.header("X-API-Key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_are_checked_and_health_metrics_and_the_map_files_stay_open() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
        let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        seed_latest(&c, &scatter(5, 7)).await;
        let keys =
            ApiKeys::parse(&format!("reader Fleet.Read {}\n", sha256sum(READER_KEY))).unwrap();
        let access = Access::start(AccessConfig {
            keys,
            oidc: None,
            anonymous: false,
        })
        .await
        .unwrap();
        let (base, _stop) = serve_with(c, ApiOptions::default(), access).await;
        let drones = format!("{base}/api/drones");

        let (status, body) = get_with(&drones, None).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"], "unauthorized");
        let (status, body) = get_with(&drones, Some("not-a-key")).await;
        assert_eq!((status, &body["error"]), (401, &"unauthorized".into()));
        let (status, body) = get_with(&drones, Some(READER_KEY)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(ids(&body).len(), 5);
        // The map's files carry no positions and load before any sign-in: open.
        assert_eq!(get_with(&format!("{base}/"), None).await.0, 200);
        let (status, config) = get_with(&format!("{base}/map/config.json"), None).await;
        assert_eq!(
            (status, config),
            (200, serde_json::json!({"signIn": null, "tiles": null}))
        );
        assert_eq!(get_with(&format!("{base}/healthz"), None).await.0, 200);
        assert_eq!(get_with(&format!("{base}/metrics"), None).await.0, 200);
        sim.shutdown().await;
    })
    .await
    .expect("bounded");
}

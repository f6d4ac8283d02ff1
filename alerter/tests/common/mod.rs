//! What the alerter's tests share: the local Cosmos endpoint (in process, 4 ranges) with
//! the positions, geofences and lease containers; positions written as the writer writes
//! latest documents (`telemetry::DocumentLayout`), and connection state as it patches it
//! onto them; a webhook receiver that records what it
//! takes and answers what a test tells it; the alerter binary as a child process.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use chrono::{DateTime, Utc};
use cosmos::{ContainerClient, ContainerSetup, CosmosClient, CosmosConfig, Credential, MasterKey};
use cosmos_sim::CosmosSim;
use serde_json::{Value, json};

/// The square fence of the tests: about 750 m by 1.1 km, west edge at [`FENCE_WEST`].
pub const FENCE_WEST: f64 = -122.35;
pub const FENCE_EAST: f64 = -122.34;
pub const FENCE_SOUTH: f64 = 47.60;
pub const FENCE_NORTH: f64 = 47.61;
/// The latitude the drones fly along, through the fence's middle.
pub const LAT: f64 = 47.605;
/// One metre of longitude at [`LAT`], degrees.
pub const LON_PER_M: f64 = 1.0 / 75_170.0;

/// The webhooks' HMAC key.
pub const SECRET: &str = "test-webhook-secret";

/// The endpoint and its containers.
pub struct Bench {
    pub sim: CosmosSim,
    pub positions: ContainerClient,
    pub fences: ContainerClient,
    pub dir: tempfile::TempDir,
}

impl Bench {
    pub async fn start() -> Bench {
        let sim = CosmosSim::builder().partitions(4).start().await.unwrap();
        let mut config = CosmosConfig::new(
            sim.endpoint().parse().unwrap(),
            Credential::MasterKey(MasterKey::from_base64(sim.key()).unwrap()),
        );
        config.request_timeout = Duration::from_secs(30);
        let client = CosmosClient::new(config).unwrap();
        let positions = client.container("telemetry", "positions");
        positions
            .create_if_missing(
                &ContainerSetup::new("/deviceId")
                    .with_indexing_policy(telemetry::indexing_policy()),
            )
            .await
            .unwrap();
        let fences = client.container("telemetry", "geofences");
        fences
            .create_if_missing(&ContainerSetup::new("/id"))
            .await
            .unwrap();
        Bench {
            sim,
            positions,
            fences,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Writes the test fence as fleet-api stores one.
    pub async fn fence(&self, id: &str) {
        let ring = [
            [FENCE_WEST, FENCE_SOUTH],
            [FENCE_EAST, FENCE_SOUTH],
            [FENCE_EAST, FENCE_NORTH],
            [FENCE_WEST, FENCE_NORTH],
            [FENCE_WEST, FENCE_SOUTH],
        ];
        let doc = json!({"id": id, "kind": "geofence",
            "geometry": {"type": "Polygon", "coordinates": [ring]}, "properties": {},
            "updatedAt": "2026-11-28T00:00:00.000Z"});
        self.fences
            .upsert(id, &serde_json::to_vec(&doc).unwrap())
            .await
            .unwrap();
    }

    /// Writes drone `device`'s latest document as the writer does.
    pub async fn fly(&self, device: &str, seq: u64, p: Fix) {
        let position = telemetry::Position {
            device_id: device.to_string(),
            seq,
            ts: p.at.unwrap_or_else(Utc::now),
            lat: LAT,
            lon: p.lon,
            alt_m: Some(p.alt_m),
            heading_deg: None,
            speed_mps: None,
            battery_pct: p.battery,
            gnss: telemetry::Gnss::default(),
        };
        let mut doc = Vec::new();
        telemetry::DocumentLayout::default().write_latest(&position, None, &mut doc);
        self.positions.upsert(device, &doc).await.unwrap();
    }

    /// Records that `device`'s agent connected or disconnected at `at`, as the writer
    /// stores an IoT Hub connection state event on the latest document: a conditional
    /// Patch of the agent fields (`telemetry::document::AGENT_FIELDS`), ordered by the
    /// event's `sequenceNumber` (`seq`, 64 hexadecimal digits in the hub's form).
    pub async fn connection(&self, device: &str, connected: bool, at: DateTime<Utc>, seq: u64) {
        let [flag, connected_at, disconnected_at, sequence, ..] = telemetry::document::AGENT_FIELDS;
        let when = if connected {
            connected_at
        } else {
            disconnected_at
        };
        let sequence_number = format!("{seq:064X}");
        let patch = json!({
            "operations": [
                {"op": "set", "path": format!("/{flag}"), "value": connected},
                {"op": "set", "path": format!("/{when}"),
                 "value": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)},
                {"op": "set", "path": format!("/{sequence}"), "value": sequence_number},
            ],
            "condition": format!(
                "FROM c WHERE NOT IS_DEFINED(c.{sequence}) OR c.{sequence} < '{sequence_number}'"
            ),
        });
        let patch: cosmos::PatchRequest = serde_json::from_value(patch).unwrap();
        self.positions
            .patch(device, device, &patch, None)
            .await
            .unwrap();
    }

    /// The range that holds `device`.
    pub async fn range_of(&self, device: &str) -> String {
        let map = self.positions.range_map().await.unwrap();
        map.range_of_key(&cosmos::PartitionKey::from(device))
            .id
            .clone()
    }

    /// Writes the rules file and returns its path.
    pub fn rules(&self, json: &str) -> PathBuf {
        let path = self.dir.path().join("rules.json");
        std::fs::write(&path, json).unwrap();
        path
    }

    pub fn dead_letters(&self) -> Vec<Value> {
        let path = self.dir.path().join("dead.jsonl");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// A position of a test drone on the line [`LAT`].
#[derive(Debug, Clone, Copy)]
pub struct Fix {
    pub lon: f64,
    pub alt_m: f64,
    pub battery: Option<u8>,
    pub at: Option<DateTime<Utc>>,
}

/// Airborne at `lon`, now.
pub fn at(lon: f64) -> Fix {
    Fix {
        lon,
        alt_m: 80.0,
        battery: None,
        at: None,
    }
}

/// Outside the fence, 300 m west of it.
pub fn west() -> Fix {
    at(FENCE_WEST - 300.0 * LON_PER_M)
}

/// Inside, in the middle.
pub fn inside() -> Fix {
    at((FENCE_WEST + FENCE_EAST) / 2.0)
}

/// Outside, 300 m east of it.
pub fn east() -> Fix {
    at(FENCE_EAST + 300.0 * LON_PER_M)
}

/// What the receiver answers an event.
pub type Answer = Box<dyn Fn(&Value) -> u16 + Send + Sync>;

/// A webhook receiver on a free port.
#[derive(Clone)]
pub struct Hook {
    pub url: String,
    taken: Arc<Mutex<Vec<Value>>>,
    refused: Arc<Mutex<u32>>,
    bad: Arc<Mutex<Vec<String>>>,
    /// While set, an event is counted in `held` and never answered.
    hold: Arc<std::sync::atomic::AtomicBool>,
    held: Arc<std::sync::atomic::AtomicU32>,
    answer: Arc<Mutex<Answer>>,
}

impl Hook {
    pub async fn start() -> Hook {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hook = Hook {
            url: format!("http://{}/hook", listener.local_addr().unwrap()),
            taken: Arc::default(),
            refused: Arc::default(),
            bad: Arc::default(),
            hold: Arc::default(),
            held: Arc::default(),
            answer: Arc::new(Mutex::new(Box::new(|_| 200))),
        };
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .with_state(hook.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        hook
    }

    /// Answers every event with what `answer` says.
    pub fn answer(&self, answer: impl Fn(&Value) -> u16 + Send + Sync + 'static) {
        *self.answer.lock().unwrap() = Box::new(answer);
    }

    /// The events taken (answered 2xx), in order.
    pub fn taken(&self) -> Vec<Value> {
        self.taken.lock().unwrap().clone()
    }

    /// Sets whether events are held unanswered (the sender waits until it gives up).
    pub fn hold(&self, on: bool) {
        self.hold.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Events held unanswered so far.
    pub fn held(&self) -> u32 {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Requests not in structured mode or not signed right (none expected).
    pub fn bad(&self) -> Vec<String> {
        self.bad.lock().unwrap().clone()
    }

    /// Requests answered with an error.
    pub fn refused(&self) -> u32 {
        *self.refused.lock().unwrap()
    }

    /// The distinct alerts taken of `device`, by kind: the ids of each.
    pub fn of(&self, device: &str) -> BTreeMap<String, Vec<String>> {
        let mut kinds: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for e in self.taken() {
            if e["data"]["deviceId"] == device {
                let ids = kinds
                    .entry(e["data"]["alert"].as_str().unwrap().into())
                    .or_default();
                let id = e["id"].as_str().unwrap().to_string();
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        kinds
    }
}

async fn receive(State(hook): State<Hook>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let structured = headers.get("content-type").and_then(|v| v.to_str().ok())
        == Some("application/cloudevents+json; charset=utf-8");
    let signed = alerter::signature(SECRET.as_bytes(), &body);
    let signature = headers
        .get(alerter::SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok());
    let Ok(event) = serde_json::from_slice::<Value>(&body) else {
        hook.bad
            .lock()
            .unwrap()
            .push("a body that is not JSON".into());
        return StatusCode::BAD_REQUEST;
    };
    if !structured || signature != Some(signed.as_str()) {
        hook.bad.lock().unwrap().push(format!("{headers:?}"));
        return StatusCode::BAD_REQUEST;
    }
    if hook.hold.load(std::sync::atomic::Ordering::SeqCst) {
        hook.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::pending::<()>().await;
    }
    let status = (hook.answer.lock().unwrap())(&event);
    if (200..300).contains(&status) {
        hook.taken.lock().unwrap().push(event);
    } else {
        *hook.refused.lock().unwrap() += 1;
    }
    StatusCode::from_u16(status).unwrap()
}

/// The alerter binary, running.
pub struct Alerter {
    child: Child,
    pub metrics: String,
}

impl Alerter {
    /// Starts an alerter named `instance` for `bench`, sending to `hook`, with the rules at
    /// `rules` and the settings `extra` on top of the tests' (short lease times).
    pub fn start(
        bench: &Bench,
        instance: &str,
        hook: &Hook,
        rules: &Path,
        extra: &[(&str, &str)],
    ) -> Alerter {
        // ALERTER_BIN: another build of the binary (a release build, for the load tool).
        let binary = std::env::var("ALERTER_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_alerter").to_string());
        let mut command = Command::new(binary);
        command
            .env_clear()
            .env("COSMOS_ENDPOINT", bench.sim.endpoint())
            .env("COSMOS_KEY", bench.sim.key())
            .env("ALERT_RULES_FILE", rules)
            .env("ALERT_WEBHOOK_URLS", &hook.url)
            .env("ALERT_WEBHOOK_SECRET", SECRET)
            .env("ALERT_INSTANCE", instance)
            .env("ALERT_FEED_START", "beginning")
            .env("ALERT_FEED_POLL", "100ms")
            .env("ALERT_LEASE_INTERVAL", "500ms")
            .env("ALERT_LEASE_EXPIRY", "3s")
            .env("ALERT_SILENT_SWEEP", "300ms")
            .env("ALERT_METRICS_ADDR", "127.0.0.1:0")
            .env(
                "ALERT_DEAD_LETTER_FILE",
                bench.dir.path().join("dead.jsonl"),
            )
            .env("RUST_LOG", "alerter=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in extra {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("the alerter starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let metrics = loop {
            let line = lines
                .next()
                .expect("the alerter prints its metrics address")
                .unwrap();
            if let Some(url) = line.strip_prefix("alerter: metrics on ") {
                break url.to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Alerter { child, metrics }
    }

    /// CPU seconds the process used so far (user and system, from `/proc`).
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        // utime and stime, fields 14 and 15 of stat(5), in clock ticks of 1/100 s.
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        ticks as f64 / 100.0
    }

    /// SIGKILL: no lease released, nothing flushed.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// The value of the metric line that starts with `prefix`, 0 if absent.
    /// Waits until the alerter has made `rounds` more requests of `purpose` (feed polls,
    /// sweeps): each is charged, so the charge grows with each. A quiet stretch measured in
    /// the alerter's own rounds, for an alert that must not come.
    pub async fn rounds(&self, purpose: &str, rounds: usize) {
        let metric = format!("alerter_request_charge_total{{purpose=\"{purpose}\"}}");
        let mut charged = self.metric(&metric).await;
        for _ in 0..rounds {
            charged = test_harness::eventually(
                &format!("another round of {purpose}"),
                Duration::from_secs(60),
                async || self.metric(&metric).await,
                |now| *now > charged,
            )
            .await;
        }
    }

    pub async fn metric(&self, prefix: &str) -> f64 {
        let text = reqwest::get(&self.metrics)
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Alerter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `check` holds, at most `limit` (generous: 2 busy cores); the workspace's
/// [`test_harness::eventually`] with a yes-or-no probe.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    test_harness::eventually(what, limit, async || check().await, |done| *done).await;
}

/// One request as a server received it.
#[derive(Debug, Clone)]
pub struct Captured {
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Header names in lower case, and their values.
    pub headers: BTreeMap<String, String>,
    pub body: Bytes,
}

/// A server on a free port that answers 200 to every request and keeps it.
#[derive(Clone)]
pub struct Capture {
    pub base: String,
    requests: Arc<Mutex<Vec<Captured>>>,
}

impl Capture {
    pub async fn start() -> Capture {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let capture = Capture {
            base: format!("http://{}", listener.local_addr().unwrap()),
            requests: Arc::default(),
        };
        let requests = capture.requests.clone();
        let app = axum::Router::new().fallback(
            move |method: axum::http::Method,
                  uri: axum::http::Uri,
                  headers: HeaderMap,
                  body: Bytes| {
                let requests = requests.clone();
                async move {
                    let headers = headers
                        .iter()
                        .map(|(k, v)| {
                            (k.as_str().to_string(), v.to_str().unwrap_or("").to_string())
                        })
                        .collect();
                    requests.lock().unwrap().push(Captured {
                        method: method.to_string(),
                        uri: uri.to_string(),
                        headers,
                        body,
                    });
                    StatusCode::OK
                }
            },
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        capture
    }

    /// The requests whose path starts with `prefix`, in order.
    pub fn requests(&self, prefix: &str) -> Vec<Captured> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.uri.starts_with(prefix))
            .cloned()
            .collect()
    }
}

/// Runs `script` (in `tests/python`) with the alerts venv's Python, `input` on standard
/// input, `args` after it; its standard output.
pub fn python(script: &str, args: &[&str], input: &[u8]) -> String {
    use std::io::Write as _;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let interpreter = root.join("../target/venv-alerts/bin/python");
    assert!(
        interpreter.exists(),
        "{} is missing: run scripts/test-all once, or python3 -m venv target/venv-alerts && target/venv-alerts/bin/pip install -r alerter/tests/python/requirements-alerts.txt",
        interpreter.display()
    );
    let mut child = Command::new(interpreter)
        .arg(root.join("tests/python").join(script))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

//! OIDC bearer tokens against an issuer served here (discovery document and JWKS over HTTP
//! on a free port), with keys and tokens made by PyJWT and cryptography
//! (`tests/python/issuer.py`, in the `target/venv-jwt` environment that scripts/test-all
//! makes from `tests/python/requirements-jwt.txt`): the API signs nothing it checks.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::{Access, AccessConfig, ApiKeys, OidcSettings};
use serde_json::{Value, json};

const AUDIENCE: &str = "api://fleet-api";

/// The python of `target/venv-jwt` (or of `FLEET_API_VENV_JWT`).
fn python() -> PathBuf {
    let venv = std::env::var_os("FLEET_API_VENV_JWT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-jwt"));
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/test-all makes it (or set FLEET_API_VENV_JWT)",
        python.display()
    );
    python
}

/// The keys and tokens of `issuer.py` for `issuer`.
async fn keys_and_tokens(issuer: &str) -> Value {
    let mut command = std::process::Command::new(python());
    command
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/issuer.py"))
        .args([issuer, AUDIENCE]);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("python runs");
    assert!(
        output.status.success(),
        "issuer.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("issuer.py prints JSON")
}

/// The issuer's published keys and how often they were fetched.
#[derive(Default)]
struct Published {
    jwks: Mutex<Value>,
    fetches: AtomicUsize,
}

/// Serves discovery under `/t/v2.0` and the keys at `/keys` on `listener`; the issuer URL.
fn serve_issuer(listener: tokio::net::TcpListener, published: Arc<Published>) -> String {
    let base = format!("http://{}", listener.local_addr().unwrap());
    let issuer = format!("{base}/t/v2.0");
    let discovery = json!({"issuer": issuer, "jwks_uri": format!("{base}/keys")});
    let app = Router::new()
        .route(
            "/t/v2.0/.well-known/openid-configuration",
            get(move || async move { axum::Json(discovery) }),
        )
        .route(
            "/keys",
            get(|State(p): State<Arc<Published>>| async move {
                p.fetches.fetch_add(1, Ordering::SeqCst);
                axum::Json(p.jwks.lock().unwrap().clone())
            }),
        )
        .with_state(published);
    tokio::spawn(async move { axum::serve(listener, app).await });
    issuer
}

async fn status(url: &str, authorization: Option<String>) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(value) = authorization {
        request = request.header("Authorization", value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_checked_against_the_issuer_and_its_rotated_keys() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let published = Arc::new(Published::default());
        let issuer = serve_issuer(listener, published.clone());
        let made = keys_and_tokens(&issuer).await;
        *published.jwks.lock().unwrap() = made["jwks"][0].clone();
        let token = |case: &str| made["tokens"][case].as_str().unwrap().to_string();
        let bearer = |case: &str| Some(format!("Bearer {}", token(case)));

        let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
        let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        seed_latest(&c, &scatter(4, 3)).await;
        let access = Access::start(AccessConfig {
            keys: ApiKeys::default(),
            oidc: Some(OidcSettings {
                issuer: issuer.clone(),
                audience: AUDIENCE.into(),
            }),
            anonymous: false,
        })
        .await
        .unwrap();
        assert_eq!(published.fetches.load(Ordering::SeqCst), 1);
        let (base, _stop) = serve_with(c, ApiOptions::default(), access).await;
        let drones = format!("{base}/api/drones");

        let (code, body) = status(&drones, bearer("read")).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(ids(&body).len(), 4);
        for case in ["admin", "within_skew"] {
            assert_eq!(status(&drones, bearer(case)).await.0, 200, "{case}");
        }
        let (code, body) = status(&drones, None).await;
        assert_eq!((code, &body["error"]), (401, &json!("unauthorized")));
        for (case, why) in [
            ("expired", "has expired"),
            ("not_yet", "not valid yet"),
            (
                "wrong_audience",
                "another audience (aud); this API is api://fleet-api",
            ),
            ("wrong_issuer", "another issuer (iss)"),
            ("unsigned", "not a signed JWT"),
            ("other_key", "signature does not match"),
        ] {
            let (code, body) = status(&drones, bearer(case)).await;
            assert_eq!(code, 401, "{case}: {body}");
            assert_eq!(body["error"], "unauthorized", "{case}");
            let message = body["message"].as_str().unwrap();
            assert!(message.contains(why), "{case}: {message}");
        }
        let basic = Some(format!("Basic {}", token("read")));
        assert_eq!(status(&drones, basic).await.0, 401);
        let (code, body) = status(&drones, bearer("no_role")).await;
        assert_eq!((code, &body["error"]), (403, &json!("forbidden")));
        assert_eq!(published.fetches.load(Ordering::SeqCst), 1);

        // The issuer rotates: a token under the new kid is taken once the keys are fetched
        // again, without a restart.
        *published.jwks.lock().unwrap() = made["jwks"][1].clone();
        let (code, body) = status(&drones, bearer("rotated")).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(published.fetches.load(Ordering::SeqCst), 2);
        // Another unknown kid right after: refused without asking the issuer again.
        assert_eq!(status(&drones, bearer("unknown_kid")).await.0, 401);
        assert_eq!(published.fetches.load(Ordering::SeqCst), 2);
        sim.shutdown().await;
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refresh_that_brings_no_keys_keeps_the_last_good_ones() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let published = Arc::new(Published::default());
        let issuer = serve_issuer(listener, published.clone());
        let made = keys_and_tokens(&issuer).await;
        *published.jwks.lock().unwrap() = made["jwks"][0].clone();
        let bearer =
            |case: &str| Some(format!("Bearer {}", made["tokens"][case].as_str().unwrap()));

        let sim = CosmosSim::unthrottled().await.unwrap();
        let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        let access = Access::start(AccessConfig {
            keys: ApiKeys::default(),
            oidc: Some(OidcSettings {
                issuer: issuer.clone(),
                audience: AUDIENCE.into(),
            }),
            anonymous: false,
        })
        .await
        .unwrap();
        let (base, _stop) = serve_with(c, ApiOptions::default(), access).await;
        let drones = format!("{base}/api/drones");
        assert_eq!(status(&drones, bearer("read")).await.0, 200);

        // The issuer's JWKS goes empty; an unknown kid makes the API fetch it again.
        *published.jwks.lock().unwrap() = json!({"keys": []});
        assert_eq!(status(&drones, bearer("unknown_kid")).await.0, 401);
        assert_eq!(published.fetches.load(Ordering::SeqCst), 2, "fetched again");
        // Tokens under the key read first still verify.
        let (code, body) = status(&drones, bearer("read")).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(status(&drones, bearer("admin")).await.0, 200);
        sim.shutdown().await;
    })
    .await
    .expect("bounded");
}

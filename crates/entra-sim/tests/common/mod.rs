//! Shared by the SDK tests: the issuer's CA in a temporary file, the Python script run from
//! the virtual environment scripts/test-all installs (`target/venv-identity`, or
//! `ENTRA_SIM_VENV_IDENTITY`), and a token checked as a resource server would: discovery
//! document, then its `jwks_uri`, then the signature by `kid`, issuer and audience.
#![allow(dead_code)] // each test binary uses part of this

use entra_sim::EntraSim;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use tokio::process::Command;

/// The bound of every test.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The API the tests ask tokens for: Cosmos DB's data plane, with a role.
pub const COSMOS: &str = "https://cosmos.azure.com";
/// Its role.
pub const COSMOS_ROLE: &str = "Data.Contributor";

/// A started issuer and a file with its CA.
pub struct TestSim {
    pub sim: EntraSim,
    pub dir: tempfile::TempDir,
}

impl TestSim {
    pub fn new(sim: EntraSim) -> TestSim {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), sim.ca_pem().expect("https")).unwrap();
        TestSim { sim, dir }
    }

    pub fn ca_path(&self) -> String {
        self.dir.path().join("ca.pem").display().to_string()
    }

    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// The environment every script run gets: where the issuer is, and the CA to trust.
    pub fn env(&self, client_id: &str, scope: &str) -> Vec<(&'static str, String)> {
        vec![
            ("ENTRA_AUTHORITY", self.sim.authority()),
            ("ENTRA_BASE", self.sim.base_url().to_owned()),
            ("ENTRA_TENANT", self.sim.tenant_id().to_owned()),
            ("ENTRA_CLIENT_ID", client_id.to_owned()),
            ("ENTRA_SCOPE", scope.to_owned()),
            ("REQUESTS_CA_BUNDLE", self.ca_path()),
        ]
    }

    /// An HTTP client trusting the issuer's CA.
    pub fn http(&self) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(self.sim.ca_pem().unwrap().as_bytes()).unwrap();
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    /// The claims of `token` after checking it against the issuer's published keys, found
    /// through the discovery document: signature (RS256, by `kid`), `iss`, `aud`, `exp`.
    pub async fn verify(&self, token: &str, audience: &str) -> Value {
        let http = self.http();
        let discovery: Value = http
            .get(self.sim.discovery_url())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(discovery["issuer"], self.sim.issuer());
        let jwks: JwkSet = http
            .get(discovery["jwks_uri"].as_str().unwrap())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let header = jsonwebtoken::decode_header(token).unwrap();
        assert_eq!(header.alg, Algorithm::RS256);
        let kid = header.kid.expect("a kid");
        let jwk = jwks
            .find(&kid)
            .unwrap_or_else(|| panic!("kid {kid} in the JWKS"));
        let key = DecodingKey::from_jwk(jwk).unwrap();
        let mut validation = Validation::new(Algorithm::RS256);
        validation.set_audience(&[audience]);
        validation.set_issuer(&[discovery["issuer"].as_str().unwrap()]);
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation)
            .unwrap_or_else(|e| panic!("the token verifies: {e}"));
        assert_eq!(data.claims["tid"], self.sim.tenant_id());
        assert_eq!(data.claims["ver"], "2.0");
        data.claims
    }
}

/// The python of the `identity` virtual environment.
pub fn python() -> PathBuf {
    let var = "ENTRA_SIM_VENV_IDENTITY";
    let venv = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/venv-identity")
    });
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/test-all installs the identity environment (or set {var})",
        python.display()
    );
    python
}

/// Runs tests/python/identity.py `mode` with `env`; returns the JSON it printed last. Panics
/// if it fails or outlives [`TEST_TIMEOUT`] (it is killed then).
pub async fn run_script(mode: &str, env: &[(&str, String)]) -> Value {
    let mut command = Command::new(python());
    command
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/identity.py"))
        .arg(mode)
        .env("PYTHONUNBUFFERED", "1")
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    let output = tokio::time::timeout(TEST_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("identity.py {mode} took over {TEST_TIMEOUT:?}"))
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "identity.py {mode} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|_| {
        panic!("identity.py {mode} printed no JSON\nstdout:\n{stdout}\nstderr:\n{stderr}")
    })
}

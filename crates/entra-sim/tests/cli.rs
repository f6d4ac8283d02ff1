//! The `entra-sim` binary: a TOML directory, plain HTTP, its URLs on standard output, and a
//! client secret token from its token endpoint.

use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

const CONFIG: &str = r#"
tenant_id = "8d1c3f0e-5b7a-4e2d-9c6f-0a1b2c3d4e5f"
token_lifetime_secs = 120

[[apps]]
client_id = "fleet-api-id"
app_id_uri = "api://fleet-api"
app_roles = ["Fleet.Reader"]

[[apps]]
client_id = "reader"
secrets = ["reader-secret"]
roles = { "api://fleet-api" = ["Fleet.Reader"] }
"#;

#[tokio::test]
async fn the_binary_serves_a_toml_directory_over_http() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("entra.toml");
        std::fs::write(&config, CONFIG).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_entra-sim"))
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let urls: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        let authority = urls["authority"].as_str().unwrap();
        assert!(authority.starts_with("http://127.0.0.1:"), "{urls}");
        assert!(
            authority.ends_with("/8d1c3f0e-5b7a-4e2d-9c6f-0a1b2c3d4e5f"),
            "{urls}"
        );

        let http = reqwest::Client::new();
        let discovery: Value = http
            .get(urls["openid_configuration"].as_str().unwrap())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(discovery["issuer"], format!("{authority}/v2.0"));
        let answer: Value = http
            .post(discovery["token_endpoint"].as_str().unwrap())
            .form(&[
                ("grant_type", "client_credentials"),
                ("client_id", "reader"),
                ("client_secret", "reader-secret"),
                ("scope", "api://fleet-api/.default"),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["token_type"], "Bearer", "{answer}");
        assert_eq!(answer["expires_in"], 120, "{answer}");
        let token = answer["access_token"].as_str().unwrap();
        let payload = token.split('.').nth(1).unwrap();
        use base64::Engine as _;
        let claims: Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(claims["aud"], "api://fleet-api");
        assert_eq!(claims["roles"], serde_json::json!(["Fleet.Reader"]));
    })
    .await
    .expect("bounded");
}

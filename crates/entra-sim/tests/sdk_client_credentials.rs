//! Client credentials, held to MSAL (`ConfidentialClientApplication`) and azure-identity
//! (`ClientSecretCredential`): with a secret, with a certificate (both assertion forms MSAL
//! sends), Entra's refusals as MSAL surfaces them, and key rotation; and azure-identity's
//! `WorkloadIdentityCredential` with a federated service-account token (AKS workload
//! identity).

mod common;

use common::{COSMOS, COSMOS_ROLE, TEST_TIMEOUT, TestSim, run_script};
use entra_sim::{App, AppCertificate, EntraSim};
use serde_json::Value;
use std::time::Duration;

const WRITER: &str = "5c0f8a52-7d3e-4b55-9a44-1f0e2b6c9d10";
const SECRET: &str = "writer-secret~value";
const SERVICE_ACCOUNT: &str = "system:serviceaccount:telemetry:cloud-writer";

async fn sim(certificate: Option<&AppCertificate>) -> TestSim {
    let mut writer = App::new(WRITER)
        .secret(SECRET)
        .federated(SERVICE_ACCOUNT)
        .role(COSMOS, COSMOS_ROLE);
    if let Some(c) = certificate {
        writer = writer.certificate(c.cert_pem.clone());
    }
    let sim = EntraSim::builder()
        .app(
            App::new("cosmos-resource")
                .app_id_uri(COSMOS)
                .app_role(COSMOS_ROLE),
        )
        .app(writer)
        .token_lifetime(Duration::from_secs(300))
        .https()
        .start()
        .await
        .unwrap();
    TestSim::new(sim)
}

/// The checks every app-only token for the writer must pass.
async fn check_writer_token(t: &TestSim, token: &str) -> Value {
    let claims = t.verify(token, COSMOS).await;
    assert_eq!(claims["azp"], WRITER);
    assert_eq!(claims["oid"], t.sim.object_id(WRITER).unwrap());
    assert_eq!(claims["sub"], claims["oid"]);
    assert_eq!(claims["roles"], serde_json::json!([COSMOS_ROLE]));
    assert_eq!(claims["idtyp"], "app");
    let (iat, exp) = (
        claims["iat"].as_u64().unwrap(),
        claims["exp"].as_u64().unwrap(),
    );
    assert_eq!(exp - iat, 300);
    claims
}

#[tokio::test]
async fn msal_and_azure_identity_get_a_token_with_a_client_secret() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim(None).await;
        let mut env = t.env(WRITER, &format!("{COSMOS}/.default"));
        env.push(("ENTRA_SECRET", SECRET.into()));
        let msal = run_script("msal-secret", &env).await;
        let token = msal["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{msal}"));
        assert_eq!(check_writer_token(&t, token).await["azpacr"], "1");

        let identity = run_script("identity-secret", &env).await;
        let token = identity["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{identity}"));
        check_writer_token(&t, token).await;
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn msal_gets_a_token_with_a_certificate_by_either_thumbprint() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let cert = AppCertificate::generate("writer").unwrap();
        let t = sim(Some(&cert)).await;
        let mut env = t.env(WRITER, &format!("{COSMOS}/.default"));
        env.push(("ENTRA_CERT", t.write("writer.pem", &cert.cert_pem)));
        env.push(("ENTRA_KEY", t.write("writer.key", &cert.key_pem)));
        // x5t and RS256 (a thumbprint given), then x5t#S256 and PS256 (the certificate given).
        for mode in ["msal-cert-thumbprint", "msal-cert-public"] {
            let out = run_script(mode, &env).await;
            let token = out["access_token"]
                .as_str()
                .unwrap_or_else(|| panic!("{mode}: {out}"));
            assert_eq!(check_writer_token(&t, token).await["azpacr"], "2");
        }
        // Another certificate's key is refused.
        let stranger = AppCertificate::generate("writer").unwrap();
        let mut env = t.env(WRITER, &format!("{COSMOS}/.default"));
        env.push(("ENTRA_CERT", t.write("s.pem", &stranger.cert_pem)));
        env.push(("ENTRA_KEY", t.write("s.key", &stranger.key_pem)));
        let out = run_script("msal-cert-public", &env).await;
        assert_eq!(out["error"], "invalid_client", "{out}");
        assert_eq!(out["error_codes"], serde_json::json!([700027]), "{out}");
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn workload_identity_credential_exchanges_a_service_account_token() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim(None).await;
        let mut env = t.env(WRITER, &format!("{COSMOS}/.default"));
        let token = t.sim.service_account_token(SERVICE_ACCOUNT).unwrap();
        env.push(("ENTRA_TOKEN_FILE", t.write("sa-token", &token)));
        let out = run_script("identity-workload", &env).await;
        let access = out["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{out}"));
        check_writer_token(&t, access).await;

        // Another service account's token matches no federated credential.
        let other = t
            .sim
            .service_account_token("system:serviceaccount:telemetry:other");
        env.pop();
        env.push(("ENTRA_TOKEN_FILE", t.write("other-token", &other.unwrap())));
        let out = run_script("identity-workload", &env).await;
        assert_eq!(out["error"], "ClientAuthenticationError", "{out}");
        assert!(
            out["message"].as_str().unwrap().contains("AADSTS70021"),
            "{out}"
        );
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn refusals_reach_msal_and_azure_identity_as_entra_words_them() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim(None).await;
        let scope = format!("{COSMOS}/.default");
        let cases = [
            (
                WRITER,
                "not-the-secret",
                scope.as_str(),
                "invalid_client",
                7000215,
            ),
            (
                "0b6d2a1e-0000-4000-8000-00000000dead",
                SECRET,
                scope.as_str(),
                "unauthorized_client",
                700016,
            ),
            (
                WRITER,
                SECRET,
                "https://vault.azure.net/.default",
                "invalid_resource",
                500011,
            ),
        ];
        for (client, secret, scope, error, code) in cases {
            let mut env = t.env(client, scope);
            env.push(("ENTRA_SECRET", secret.into()));
            let out = run_script("msal-secret", &env).await;
            assert_eq!(out["error"], error, "{out}");
            assert_eq!(out["error_codes"], serde_json::json!([code]), "{out}");
            let description = out["error_description"].as_str().unwrap();
            assert!(description.starts_with(&format!("AADSTS{code}: ")), "{out}");
            let out = run_script("identity-secret", &env).await;
            assert_eq!(out["error"], "ClientAuthenticationError", "{out}");
            assert!(
                out["message"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("AADSTS{code}")),
                "{out}"
            );
        }
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn a_rotated_key_signs_new_tokens_and_the_old_one_stays_published() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim(None).await;
        let mut env = t.env(WRITER, &format!("{COSMOS}/.default"));
        env.push(("ENTRA_SECRET", SECRET.into()));
        let before = run_script("msal-secret", &env).await["access_token"]
            .as_str()
            .unwrap()
            .to_owned();
        let answer: Value = t
            .http()
            .post(format!(
                "{}{}",
                t.sim.base_url(),
                entra_sim::ROTATE_KEYS_PATH
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let new_kid = answer["kid"].as_str().unwrap();
        // A fresh process: MSAL's token cache does not outlive it.
        let after = run_script("msal-secret", &env).await["access_token"]
            .as_str()
            .unwrap()
            .to_owned();
        let kid = |token: &str| jsonwebtoken::decode_header(token).unwrap().kid.unwrap();
        assert_eq!(kid(&after), new_kid);
        assert_ne!(kid(&before), new_kid);
        check_writer_token(&t, &before).await;
        check_writer_token(&t, &after).await;
    })
    .await
    .expect("bounded");
}

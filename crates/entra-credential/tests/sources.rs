//! Each credential source against the local Entra ID issuer over HTTPS, through Microsoft's
//! `azure_identity`: a client secret, workload identity (a federated service-account token
//! file) and the App Service managed identity endpoint, each giving a Cosmos DB token for
//! its own identity; a refused token is replaced by a new one.
//!
//! The credentials read their settings from the process environment: one test sets it,
//! once, and no other test of this binary reads it.

use std::time::Duration;

use entra_credential::{COSMOS_SCOPE, CosmosTokens, EntraCredential, Source};
use entra_sim::{App, EntraSim, ManagedIdentity};
use std::sync::Arc;

const COSMOS: &str = "https://cosmos.azure.com";
const WRITER: &str = "5c0f8a52-7d3e-4b55-9a44-1f0e2b6c9d10";
const SECRET: &str = "writer-secret~value";
const SERVICE_ACCOUNT: &str = "system:serviceaccount:telemetry:cloud-writer";

/// The token's claims, read without checking the signature (the issuer's own checks are
/// entra-sim's tests; here, whose token it is).
fn claims(token: &str) -> serde_json::Value {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

fn set(name: &str, value: &str) {
    // SAFETY: one test sets the environment, before any credential that reads it exists;
    // the other test of this binary reads none of it.
    unsafe { std::env::set_var(name, value) }
}

#[tokio::test]
async fn each_source_gets_a_cosmos_token_for_its_identity() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let sim = EntraSim::builder()
            .app(App::new("cosmos-resource").app_id_uri(COSMOS))
            .app(App::new(WRITER).secret(SECRET).federated(SERVICE_ACCOUNT))
            .managed_identity(ManagedIdentity::new(""))
            .https()
            .start()
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, sim.ca_pem().unwrap()).unwrap();
        let token_file = dir.path().join("sa-token");
        std::fs::write(
            &token_file,
            sim.service_account_token(SERVICE_ACCOUNT).unwrap(),
        )
        .unwrap();
        set("SSL_CERT_FILE", ca.to_str().unwrap());
        set("AZURE_AUTHORITY_HOST", sim.base_url());
        set("AZURE_TENANT_ID", sim.tenant_id());
        set("AZURE_CLIENT_ID", WRITER);
        set("AZURE_CLIENT_SECRET", SECRET);
        set("AZURE_FEDERATED_TOKEN_FILE", token_file.to_str().unwrap());
        set("IDENTITY_ENDPOINT", &sim.identity_endpoint());
        set("IDENTITY_HEADER", sim.identity_header());

        for source in [Source::Secret, Source::Workload] {
            let credential = EntraCredential::new(source).unwrap();
            let token = credential.token(COSMOS_SCOPE).await.unwrap();
            let claims = claims(&token);
            assert_eq!(claims["aud"], COSMOS, "{source}");
            assert_eq!(claims["tid"], sim.tenant_id(), "{source}");
            assert_eq!(claims["oid"], sim.object_id(WRITER).unwrap(), "{source}");
        }

        // The managed identity is its own principal (IDENTITY_ENDPOINT, IDENTITY_HEADER).
        let managed = EntraCredential::new(Source::Managed).unwrap();
        let claims = claims(&managed.token(COSMOS_SCOPE).await.unwrap());
        assert_eq!(claims["aud"], COSMOS);
        let system = claims["azp"].as_str().unwrap();
        assert_eq!(claims["oid"], sim.object_id(system).unwrap());

        // A cached token is reused until a service refuses it; then a new one is issued.
        let tokens = CosmosTokens(Arc::new(EntraCredential::new(Source::Secret).unwrap()));
        let first = cosmos::TokenCredential::token(&tokens).await.unwrap();
        assert_eq!(
            cosmos::TokenCredential::token(&tokens).await.unwrap(),
            first
        );
        cosmos::TokenCredential::refused(&tokens);
        let renewed = cosmos::TokenCredential::token(&tokens).await.unwrap();
        assert_ne!(renewed, first);
        assert_eq!(
            self::claims(&renewed)["oid"],
            sim.object_id(WRITER).unwrap()
        );
    })
    .await
    .expect("bounded");
}

#[test]
fn the_environment_chooses_the_source() {
    let given = |names: &[&str]| {
        let names = names.to_vec();
        Source::detect(move |name| names.contains(&name))
    };
    assert_eq!(
        given(&["AZURE_FEDERATED_TOKEN_FILE", "AZURE_CLIENT_SECRET"]),
        Source::Workload
    );
    assert_eq!(given(&["AZURE_CLIENT_SECRET_FILE"]), Source::Secret);
    assert_eq!(given(&["IDENTITY_ENDPOINT"]), Source::Managed);
    assert_eq!(given(&[]), Source::Managed);
    assert_eq!("cli".parse::<Source>(), Ok(Source::Cli));
    let err = "azure-cli".parse::<Source>().unwrap_err();
    assert!(err.contains("workload, managed, secret or cli"), "{err}");
}

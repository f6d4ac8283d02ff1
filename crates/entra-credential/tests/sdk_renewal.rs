//! The credential as the Azure SDKs take it (`for_azure_sdk`), against the local issuer:
//! a cached token is handed out again while it has more than 7 minutes left, and a fresh one
//! once it has less, so that the Event Hubs SDK, which renews 6 minutes ahead and gives a
//! link up when the expiry does not advance, always gets a later one.
//!
//! The credential reads its settings from the process environment: the one test of this
//! binary sets it.

use std::time::Duration;

use entra_credential::{EntraCredential, Source};
use entra_sim::{App, EntraSim};

const EVENTHUBS: &str = "https://eventhubs.azure.net";
const SCOPE: &str = "https://eventhubs.azure.net/.default";
const WRITER: &str = "7e1d9c40-2b6a-4f83-8d15-3a9c0e4b7f21";
const SECRET: &str = "writer-secret~value";

/// An issuer of tokens living `lifetime`, and the environment pointing at it.
async fn issuer(lifetime: Duration, dir: &std::path::Path) -> EntraSim {
    let sim = EntraSim::builder()
        .app(App::new("eventhubs").app_id_uri(EVENTHUBS))
        .app(App::new(WRITER).secret(SECRET))
        .token_lifetime(lifetime)
        .https()
        .start()
        .await
        .unwrap();
    let ca = dir.join(format!("ca-{}.pem", lifetime.as_secs()));
    std::fs::write(&ca, sim.ca_pem().unwrap()).unwrap();
    for (name, value) in [
        ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ("AZURE_AUTHORITY_HOST", sim.base_url()),
        ("AZURE_TENANT_ID", sim.tenant_id()),
        ("AZURE_CLIENT_ID", WRITER),
        ("AZURE_CLIENT_SECRET", SECRET),
    ] {
        // SAFETY: the binary's one test sets the environment before it builds a credential
        // that reads it, and reads none of it elsewhere.
        unsafe { std::env::set_var(name, value) }
    }
    sim
}

#[tokio::test]
async fn a_token_near_its_expiry_is_replaced_for_the_sdk() {
    let dir = tempfile::tempdir().unwrap();

    // An hour's token: the cached one again.
    let _hour = issuer(Duration::from_secs(3600), dir.path()).await;
    let sdk = std::sync::Arc::new(EntraCredential::new(Source::Secret).unwrap()).for_azure_sdk();
    let first = sdk.get_token(&[SCOPE], None).await.unwrap();
    let again = sdk.get_token(&[SCOPE], None).await.unwrap();
    assert_eq!(again.token.secret(), first.token.secret());

    // Six-minute tokens: already inside the SDK's renewal window, so each call gets a new
    // one. The first is issued a minute behind (the issuer's clock has whole seconds), so the
    // next, issued on time, expires later without the test waiting on the clock.
    let short = issuer(Duration::from_secs(360), dir.path()).await;
    let sdk = std::sync::Arc::new(EntraCredential::new(Source::Secret).unwrap()).for_azure_sdk();
    short.set_clock_behind(Duration::from_secs(60));
    let first = sdk.get_token(&[SCOPE], None).await.unwrap();
    short.set_clock_behind(Duration::ZERO);
    let renewed = sdk.get_token(&[SCOPE], None).await.unwrap();
    assert_ne!(renewed.token.secret(), first.token.secret());
    assert!(
        renewed.expires_on > first.expires_on,
        "{} then {}",
        first.expires_on,
        renewed.expires_on
    );
}

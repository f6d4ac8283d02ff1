//! Authorization code with PKCE, held to MSAL's `PublicClientApplication`
//! (`initiate_auth_code_flow`, the browser's redirect followed with `requests`,
//! `acquire_token_by_auth_code_flow`, then a refresh through `acquire_token_silent`).

mod common;

use common::{TEST_TIMEOUT, TestSim, run_script};
use entra_sim::{App, EntraSim, User};
use serde_json::json;

const MAP: &str = "7a1d44c2-3f6b-4e0a-8d15-2b9c0e6f4a21";
const API: &str = "api://fleet-api";
const REDIRECT: &str = "http://localhost:8080/auth/callback";

async fn sim() -> TestSim {
    let sim = EntraSim::builder()
        .app(
            App::new("fleet-api-id")
                .app_id_uri(API)
                .scope("Fleet.Read")
                .app_role("Fleet.Operator"),
        )
        .app(App::new(MAP).public_client().redirect_uri(REDIRECT))
        .user(User::new("pilot@contoso.test").role(API, "Fleet.Operator"))
        .user(User::new("other@contoso.test"))
        .https()
        .start()
        .await
        .unwrap();
    TestSim::new(sim)
}

#[tokio::test]
async fn msal_signs_a_user_in_with_pkce_and_refreshes() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim().await;
        let mut env = t.env(MAP, &format!("{API}/Fleet.Read"));
        env.push(("ENTRA_REDIRECT_URI", REDIRECT.into()));
        let out = run_script("msal-auth-code", &env).await;
        let token = out["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{out}"));
        assert_eq!(out["account"], "pilot@contoso.test");
        assert_eq!(out["has_refresh_token"], true);

        let access = t.verify(token, API).await;
        assert_eq!(access["scp"], "Fleet.Read");
        assert_eq!(access["roles"], json!(["Fleet.Operator"]));
        assert_eq!(access["azp"], MAP);
        assert_eq!(access["azpacr"], "0");
        assert_eq!(
            access["oid"],
            t.sim.object_id("pilot@contoso.test").unwrap()
        );
        assert_eq!(access["preferred_username"], "pilot@contoso.test");

        // The ID token is for the client and carries the nonce MSAL checked.
        let id = t.verify(out["id_token"].as_str().unwrap(), MAP).await;
        assert_eq!(id["nonce"], out["nonce_hash"]);
        assert!(id["nonce"].as_str().is_some_and(|n| !n.is_empty()));
        assert_eq!(id["oid"], access["oid"]);
        assert_eq!(id["sub"], access["sub"]);

        // The refresh token MSAL kept brought a new access token.
        let refreshed = out["refreshed_access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{out}"));
        assert_ne!(refreshed, token);
        assert_eq!(t.verify(refreshed, API).await["scp"], "Fleet.Read");
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn a_wrong_code_verifier_is_refused() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim().await;
        let mut env = t.env(MAP, &format!("{API}/Fleet.Read"));
        env.push(("ENTRA_REDIRECT_URI", REDIRECT.into()));
        let out = run_script("msal-auth-code-wrong-verifier", &env).await;
        assert_eq!(out["error"], "invalid_grant", "{out}");
        assert_eq!(out["error_codes"], json!([501481]), "{out}");
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn an_unregistered_redirect_uri_is_not_redirected_to() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim().await;
        let mut env = t.env(MAP, &format!("{API}/Fleet.Read"));
        env.push(("ENTRA_REDIRECT_URI", "http://evil.example/cb".into()));
        let out = run_script("msal-auth-code", &env).await;
        assert_eq!(out["error"], "no redirect", "{out}");
        assert_eq!(out["status"], 400, "{out}");
        assert!(
            out["body"].as_str().unwrap().contains("AADSTS50011"),
            "{out}"
        );
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn authorization_without_pkce_goes_back_with_an_error() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim().await;
        let url = format!(
            "{}/oauth2/v2.0/authorize?client_id={MAP}&response_type=code&redirect_uri={}&scope=openid&state=s1",
            t.sim.authority(),
            url_escape(REDIRECT)
        );
        let answer = t.http().get(url).send().await.unwrap();
        assert_eq!(answer.status(), 303);
        let location = answer.headers()["location"].to_str().unwrap().to_owned();
        assert!(location.starts_with(&format!("{REDIRECT}?error=invalid_request")), "{location}");
        assert!(location.contains("AADSTS9002325") && location.ends_with("&state=s1"), "{location}");
    })
    .await
    .expect("bounded");
}

fn url_escape(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

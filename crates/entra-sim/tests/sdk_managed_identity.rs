//! The App Service managed identity endpoint, held to azure-identity's
//! `ManagedIdentityCredential` with `IDENTITY_ENDPOINT` and `IDENTITY_HEADER` set.

mod common;

use common::{COSMOS, COSMOS_ROLE, TEST_TIMEOUT, TestSim, run_script};
use entra_sim::{App, EntraSim, ManagedIdentity};
use serde_json::json;

const USER_ASSIGNED: &str = "9e3b1f7c-2d4a-4c8e-b6f0-5a7d3c1e9b42";

async fn sim() -> TestSim {
    let sim = EntraSim::builder()
        .app(
            App::new("cosmos-resource")
                .app_id_uri(COSMOS)
                .app_role(COSMOS_ROLE),
        )
        .managed_identity(ManagedIdentity::new("").role(COSMOS, COSMOS_ROLE))
        .managed_identity(ManagedIdentity::new(USER_ASSIGNED))
        .https()
        .start()
        .await
        .unwrap();
    TestSim::new(sim)
}

fn env(t: &TestSim, client_id: &str, header: &str) -> Vec<(&'static str, String)> {
    let mut env = t.env(client_id, &format!("{COSMOS}/.default"));
    env.push(("IDENTITY_ENDPOINT", t.sim.identity_endpoint()));
    env.push(("IDENTITY_HEADER", header.to_owned()));
    env
}

#[tokio::test]
async fn managed_identity_credential_gets_tokens_for_system_and_user_assigned_identities() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim().await;
        let out = run_script("identity-managed", &env(&t, "", t.sim.identity_header())).await;
        let token = out["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{out}"));
        let claims = t.verify(token, COSMOS).await;
        assert_eq!(claims["roles"], json!([COSMOS_ROLE]));
        assert_eq!(claims["idtyp"], "app");
        assert_eq!(claims["exp"].as_i64(), out["expires_on"].as_i64());
        let system = claims["azp"].as_str().unwrap().to_owned();
        assert_eq!(claims["oid"], t.sim.object_id(&system).unwrap());

        let out = run_script(
            "identity-managed",
            &env(&t, USER_ASSIGNED, t.sim.identity_header()),
        )
        .await;
        let token = out["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{out}"));
        let claims = t.verify(token, COSMOS).await;
        assert_eq!(claims["azp"], USER_ASSIGNED);
        assert_eq!(claims["oid"], t.sim.object_id(USER_ASSIGNED).unwrap());
        assert!(claims.get("roles").is_none(), "{claims}");
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn a_wrong_identity_header_is_refused() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let t = sim().await;
        let out = run_script("identity-managed", &env(&t, "", "not-the-header")).await;
        // azure-identity reports the endpoint's refusal as "unavailable", with its message.
        assert_eq!(out["error"], "CredentialUnavailableError", "{out}");
        assert!(
            out["message"]
                .as_str()
                .unwrap()
                .contains("X-IDENTITY-HEADER"),
            "{out}"
        );
    })
    .await
    .expect("bounded");
}

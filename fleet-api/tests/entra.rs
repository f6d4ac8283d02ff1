//! Bearer tokens from the local Entra ID issuer (`entra-sim`, held to MSAL and azure-identity
//! in its own tests), checked by the API as it checks Entra's: a token with the `Fleet.Read`
//! app role reads; no token, a token for another audience, an expired one (an issuer whose
//! clock runs behind), one whose signature was stripped (`alg: none`) and one whose
//! signature does not match its claims are refused with 401; a token without the role with
//! 403; a `Fleet.Read` token reads a geofence but may not change it (403), a `Fleet.Admin`
//! token may. And the API itself reaching Cosmos DB with an Entra identity (no key; the
//! account's local authentication disabled): with "Cosmos DB Built-in Data Reader" it reads
//! the fleet, and a geofence write is refused naming the role it lacks.

mod common;

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use common::*;
use cosmos_sim::{COSMOS_AUDIENCE, CosmosSim, DataRole, EntraTrust};
use entra_sim::{App, EntraSim};
use fleet_api::ApiOptions;
use fleet_api::{Access, AccessConfig, ApiKeys, OidcSettings};
use serde_json::Value;

const API: &str = "api://fleet-api";

/// An access token for `client` (secret `secret`) to call `resource`.
async fn token(entra: &EntraSim, client: &str, resource: &str) -> String {
    token_at(&entra.token_endpoint(), client, resource).await
}

/// An access token for `client` (secret `secret`) to call `resource`, from the token
/// endpoint `endpoint`.
async fn token_at(endpoint: &str, client: &str, resource: &str) -> String {
    let response = reqwest::Client::new()
        .post(endpoint)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", client),
            ("client_secret", "secret"),
            ("scope", &format!("{resource}/.default")),
        ])
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    body["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token: {body}"))
        .to_string()
}

/// GET `url` with `token` as the bearer, if any: status and body.
async fn get_as(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `token` with its header replaced by `header` and no signature.
fn unsigned(token: &str, header: &str) -> String {
    let claims = token.split('.').nth(1).unwrap();
    format!("{}.{claims}.", B64.encode(header))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entra_tokens_read_with_the_role_and_are_refused_otherwise() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let entra = EntraSim::builder()
            .app(
                App::new("fleet-api-id")
                    .app_id_uri(API)
                    .app_role("Fleet.Read")
                    .app_role("Fleet.Admin"),
            )
            .app(
                App::new("operator")
                    .secret("secret")
                    .role(API, "Fleet.Admin"),
            )
            .app(App::new("cosmos").app_id_uri("https://cosmos.azure.com"))
            .app(
                App::new("dashboard")
                    .secret("secret")
                    .role(API, "Fleet.Read"),
            )
            .app(App::new("no-role").secret("secret"))
            .start()
            .await
            .unwrap();
        let sim = CosmosSim::unthrottled().await.unwrap();
        let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        seed_latest(&c, &scatter(6, 3)).await;
        let access = Access::start(AccessConfig {
            keys: ApiKeys::default(),
            oidc: Some(OidcSettings {
                issuer: entra.issuer(),
                audience: API.into(),
            }),
            anonymous: false,
        })
        .await
        .unwrap();
        let (base, _stop) = serve_with(c, ApiOptions::default(), access).await;
        let drones = format!("{base}/api/drones");

        let reader = token(&entra, "dashboard", API).await;
        let (status, body) = get_as(&drones, Some(&reader)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(ids(&body).len(), 6);

        assert_eq!(get_as(&drones, None).await.0, 401);
        let no_role = token(&entra, "no-role", API).await;
        assert_eq!(get_as(&drones, Some(&no_role)).await.0, 403);
        let for_cosmos = token(&entra, "dashboard", "https://cosmos.azure.com").await;
        assert_eq!(get_as(&drones, Some(&for_cosmos)).await.0, 401);
        let stripped = unsigned(&reader, r#"{"alg":"none","typ":"JWT"}"#);
        assert_eq!(get_as(&drones, Some(&stripped)).await.0, 401);
        // The header of a real token, naming its kid, over another token's claims: the
        // signature no longer matches.
        let mut parts: Vec<&str> = reader.split('.').collect();
        parts[1] = no_role.split('.').nth(1).unwrap();
        assert_eq!(get_as(&drones, Some(&parts.join("."))).await.0, 401);

        // Geofences: the reader may read them but not change them; the operator may.
        let fence = format!("{base}/api/geofences/depot");
        let circle = serde_json::json!({
            "type": "Feature",
            "geometry": {"type": "Point", "coordinates": [HOME.0, HOME.1]},
            "properties": {"subType": "Circle", "radius": 800}
        });
        let put = |token: String| {
            let (fence, circle) = (fence.clone(), circle.clone());
            async move {
                let response = reqwest::Client::new()
                    .put(fence)
                    .bearer_auth(token)
                    .json(&circle)
                    .send()
                    .await
                    .unwrap();
                response.status().as_u16()
            }
        };
        assert_eq!(put(reader.clone()).await, 403);
        let operator = token(&entra, "operator", API).await;
        assert_eq!(put(operator).await, 201);
        let (status, body) = get_as(&fence, Some(&reader)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["properties"]["radius"], 800.0);

        // The issuer's clock two hours behind: a token that expired an hour ago by ours.
        entra.set_clock_behind(Duration::from_secs(2 * 3600));
        let expired = token(&entra, "dashboard", API).await;
        let (status, body) = get_as(&drones, Some(&expired)).await;
        assert_eq!(status, 401, "{body}");
        assert!(
            body.to_string().to_lowercase().contains("expired"),
            "{body}"
        );
        sim.shutdown().await;
    })
    .await
    .expect("bounded");
}

/// Client credentials tokens of `client` for Cosmos DB, asked for at every request: the
/// Cosmos DB side of the test. (The programs' own credential, through azure_identity, is
/// tested in `crates/entra-credential` and the writer's `tests/entra.rs`.)
struct ClientCredentials {
    endpoint: String,
    client: &'static str,
}

impl cosmos::TokenCredential for ClientCredentials {
    fn token(
        &self,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<String, cosmos::CosmosError>> + Send + '_>,
    > {
        Box::pin(async move { Ok(token_at(&self.endpoint, self.client, COSMOS_AUDIENCE).await) })
    }
}

fn cosmos_as(sim: &CosmosSim, entra: &EntraSim, client: &'static str) -> cosmos::CosmosClient {
    let credential = ClientCredentials {
        endpoint: entra.token_endpoint(),
        client,
    };
    cosmos::CosmosClient::new(cosmos::CosmosConfig::new(
        sim.endpoint().parse().unwrap(),
        cosmos::Credential::Token(std::sync::Arc::new(credential)),
    ))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_reader_identity_reads_the_fleet_and_may_not_change_geofences() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let entra = EntraSim::builder()
            .app(
                App::new("fleet-api-id")
                    .app_id_uri(API)
                    .app_role("Fleet.Admin"),
            )
            .app(
                App::new("operator")
                    .secret("secret")
                    .role(API, "Fleet.Admin"),
            )
            .app(App::new("cosmos").app_id_uri(COSMOS_AUDIENCE))
            .app(App::new("fleet-api").secret("secret"))
            .app(App::new("seeder").secret("secret"))
            .start()
            .await
            .unwrap();
        let api_identity = entra.object_id("fleet-api").unwrap().to_owned();
        let sim = CosmosSim::builder()
            .ru_per_sec(f64::INFINITY)
            .entra(EntraTrust::new(entra.issuer(), entra.tenant_id()))
            .role_assignment(&api_identity, DataRole::Reader)
            .role_assignment(entra.object_id("seeder").unwrap(), DataRole::Contributor)
            .local_auth(false)
            .start()
            .await
            .unwrap();
        sim.create_container("telemetry", "positions", "/deviceId")
            .unwrap();
        sim.create_container("telemetry", "geofences", "/id")
            .unwrap();
        let seeder = cosmos_as(&sim, &entra, "seeder").container("telemetry", "positions");
        seed_latest(&seeder, &scatter(6, 3)).await;
        let access = Access::start(AccessConfig {
            keys: ApiKeys::default(),
            oidc: Some(OidcSettings {
                issuer: entra.issuer(),
                audience: API.into(),
            }),
            anonymous: false,
        })
        .await
        .unwrap();
        let positions = cosmos_as(&sim, &entra, "fleet-api").container("telemetry", "positions");
        let (base, _stop) = serve_with(positions, ApiOptions::default(), access).await;

        let operator = token(&entra, "operator", API).await;
        let (status, body) = get_as(&format!("{base}/api/drones"), Some(&operator)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(ids(&body).len(), 6);

        let put = || {
            reqwest::Client::new()
                .put(format!("{base}/api/geofences/depot"))
                .bearer_auth(&operator)
                .json(&serde_json::json!({
                    "type": "Feature",
                    "geometry": {"type": "Point", "coordinates": [HOME.0, HOME.1]},
                    "properties": {"subType": "Circle", "radius": 800}
                }))
                .send()
        };
        let refused = put().await.unwrap();
        assert_eq!(refused.status().as_u16(), 502);
        let body: Value = refused.json().await.unwrap();
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("Cosmos DB Built-in Data Contributor"),
            "{body}"
        );
        // The role given, the same API writes the fence.
        sim.assign_role(&api_identity, Some(DataRole::Contributor))
            .unwrap();
        assert_eq!(put().await.unwrap().status().as_u16(), 201);
    })
    .await
    .expect("bounded");
}

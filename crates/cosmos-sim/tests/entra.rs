//! Entra ID tokens from the local issuer (`entra-sim`, itself held to MSAL and azure-identity)
//! against the endpoint over raw HTTP, as the service takes them: data-plane roles by the
//! token's principal (a Contributor writes and reads, a Reader reads and queries but may not
//! write, a principal without a role is refused everything), management operations refused to
//! tokens but not to the key, tokens that are expired, for another audience, of another tenant
//! or with a signature that does not match refused with 401, and an account with local
//! authentication disabled refusing the key.

mod common;

use std::time::Duration;

use common::{DOCS, Rest};
use cosmos_sim::{COSMOS_AUDIENCE, CosmosSim, DataRole, EntraTrust};
use cosmos_wire::headers as h;
use entra_sim::{App, EntraSim};
use reqwest::Method;
use serde_json::{Value, json};

/// The account URL the endpoint stands in for (an audience it accepts when told to).
const ACCOUNT_URL: &str = "https://drones.documents.azure.com";
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// An issuer where `writer`, `reader` and `stranger` are apps with secret `secret`, and the
/// resources are Cosmos DB, the account URL and another API.
async fn issuer() -> EntraSim {
    let mut builder = EntraSim::builder()
        .app(App::new("cosmos").app_id_uri(COSMOS_AUDIENCE))
        .app(App::new("account").app_id_uri(ACCOUNT_URL))
        .app(App::new("other-api").app_id_uri("api://other"));
    for client in ["writer", "reader", "stranger"] {
        builder = builder.app(App::new(client).secret("secret"));
    }
    builder.start().await.unwrap()
}

/// An endpoint that trusts `entra`'s tenant, with `writer` a Contributor and `reader` a
/// Reader, and database `db` with container `c` on `/deviceId`.
async fn endpoint(entra: &EntraSim, local_auth: bool) -> CosmosSim {
    let sim = CosmosSim::builder()
        .entra(EntraTrust::new(entra.issuer(), entra.tenant_id()).audience(ACCOUNT_URL))
        .role_assignment(entra.object_id("writer").unwrap(), DataRole::Contributor)
        .role_assignment(entra.object_id("reader").unwrap(), DataRole::Reader)
        .local_auth(local_auth)
        .start()
        .await
        .unwrap();
    sim.create_container("db", "c", "/deviceId").unwrap();
    sim
}

/// A client credentials token of `client` for `resource`.
async fn token(entra: &EntraSim, client: &str, resource: &str) -> String {
    let response = reqwest::Client::new()
        .post(entra.token_endpoint())
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

fn upsert_headers() -> Vec<(&'static str, String)> {
    vec![
        (h::PARTITION_KEY, r#"["drone-1"]"#.into()),
        (h::IS_UPSERT, "True".into()),
    ]
}

fn doc(seq: i64) -> Option<Vec<u8>> {
    Some(
        json!({"id": "p1", "deviceId": "drone-1", "seq": seq})
            .to_string()
            .into_bytes(),
    )
}

/// GET the document `p1`.
async fn read(rest: &Rest) -> common::Answer {
    let pk = [(h::PARTITION_KEY, r#"["drone-1"]"#.to_string())];
    rest.send(Method::GET, &format!("{DOCS}/p1"), &pk, None)
        .await
}

/// The message of an error answer.
fn message(answer: &common::Answer) -> &str {
    answer.body["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_decide_what_a_token_may_do_and_management_is_for_the_key() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let entra = issuer().await;
        let sim = endpoint(&entra, true).await;
        let url = sim.endpoint();
        let writer = Rest::with_token(&url, &token(&entra, "writer", COSMOS_AUDIENCE).await);
        let reader = Rest::with_token(&url, &token(&entra, "reader", COSMOS_AUDIENCE).await);
        let stranger = Rest::with_token(&url, &token(&entra, "stranger", COSMOS_AUDIENCE).await);

        // The Contributor writes and reads.
        let written = writer
            .send(Method::POST, DOCS, &upsert_headers(), doc(1))
            .await;
        assert_eq!(written.status, 201, "{}", written.body);
        assert_eq!(read(&writer).await.body["seq"], 1);

        // The Reader reads, queries and reads metadata, but may not write.
        assert_eq!(read(&reader).await.body["seq"], 1);
        let found = reader
            .query("db", "c", "SELECT * FROM c", json!([]), (h::PARTITION_KEY, r#"["drone-1"]"#.into()))
            .await;
        assert_eq!(found.status, 200, "{}", found.body);
        assert_eq!(found.body["Documents"][0]["id"], "p1");
        assert_eq!(reader.ranges("db", "c").await.len(), 4);
        let refused = reader
            .send(Method::POST, DOCS, &upsert_headers(), doc(2))
            .await;
        assert_eq!(refused.status, 403, "{}", refused.body);
        assert_eq!(refused.header(h::SUBSTATUS), Some("5301"));
        let oid = entra.object_id("reader").unwrap();
        assert!(
            message(&refused).contains(&format!(
                "principal [{oid}] does not have required RBAC permissions to perform action [Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/items/upsert]"
            )),
            "{}",
            refused.body
        );
        assert_eq!(read(&writer).await.body["seq"], 1, "the refused write left no trace");

        // A principal without a role assignment is refused even the account's metadata.
        let nothing = stranger.send(Method::GET, "/", &[], None).await;
        assert_eq!(nothing.status, 403);
        assert!(
            message(&nothing).contains("[Microsoft.DocumentDB/databaseAccounts/readMetadata] on resource [/]"),
            "{}",
            nothing.body
        );
        assert_eq!(read(&stranger).await.status, 403);

        // Creating a container is management: refused to a token, even a Contributor's; the
        // key may.
        let definition = json!({"id": "more", "partitionKey": {"paths": ["/deviceId"], "kind": "Hash", "version": 2}});
        let body = || Some(definition.to_string().into_bytes());
        let by_token = writer.send(Method::POST, "/dbs/db/colls", &[], body()).await;
        assert_eq!(by_token.status, 403, "{}", by_token.body);
        assert_eq!(by_token.header(h::SUBSTATUS), Some("5300"));
        assert!(
            message(&by_token).contains("The given request [POST /dbs/db/colls] cannot be authorized by AAD token in data plane"),
            "{}",
            by_token.body
        );
        let by_key = Rest::new(&url, sim.key())
            .send(Method::POST, "/dbs/db/colls", &[], body())
            .await;
        assert_eq!(by_key.status, 201, "{}", by_key.body);
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_other_audience_other_tenant_and_tampered_tokens_are_refused() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let entra = issuer().await;
        let sim = endpoint(&entra, true).await;
        let url = sim.endpoint();
        let status_with = |token: String| {
            let url = url.clone();
            async move {
                let answer = read(&Rest::with_token(&url, &token)).await;
                (answer.status.as_u16(), answer.body)
            }
        };

        // A token for the account URL is taken as one for https://cosmos.azure.com is.
        let for_account = token(&entra, "writer", ACCOUNT_URL).await;
        assert_eq!(status_with(for_account).await.0, 404, "no document yet, but let in");

        let other = token(&entra, "writer", "api://other").await;
        let (status, body) = status_with(other).await;
        assert_eq!(status, 401, "{body}");
        let text = body["message"].as_str().unwrap();
        assert!(
            text.contains("Provided AAD token is intended for [api://other]. This database account accepts tokens intended for [https://cosmos.azure.com"),
            "{text}"
        );

        // The signature of one token over another's claims.
        let writer = token(&entra, "writer", COSMOS_AUDIENCE).await;
        let reader = token(&entra, "reader", COSMOS_AUDIENCE).await;
        let mut parts: Vec<&str> = writer.split('.').collect();
        parts[1] = reader.split('.').nth(1).unwrap();
        let (status, body) = status_with(parts.join(".")).await;
        assert_eq!(status, 401, "{body}");
        assert!(body["message"].as_str().unwrap().contains("signature"), "{body}");

        // Issued by a clock two hours behind, with the default lifetime: expired.
        entra.set_clock_behind(Duration::from_secs(2 * 3600));
        let expired = token(&entra, "writer", COSMOS_AUDIENCE).await;
        let (status, body) = status_with(expired).await;
        assert_eq!(status, 401, "{body}");
        let text = body["message"].as_str().unwrap();
        assert!(
            text.starts_with("Request blocked by Auth cosmos-sim : Provided AAD token has been expired since [")
                && text.contains("(UTC)]. Current server time is [")
                && text.ends_with("Please refresh the AAD token."),
            "{text}"
        );
        entra.set_clock_behind(Duration::ZERO);

        // An endpoint of another tenant refuses the same issuer's tokens.
        let elsewhere = CosmosSim::builder()
            .entra(EntraTrust::new(entra.issuer(), "00000000-1111-2222-3333-444444444444"))
            .role_assignment(entra.object_id("writer").unwrap(), DataRole::Contributor)
            .start()
            .await
            .unwrap();
        let answer = Rest::with_token(&elsewhere.endpoint(), &writer)
            .send(Method::GET, "/", &[], None)
            .await;
        assert_eq!(answer.status, 401, "{}", answer.body);
        assert!(message(&answer).contains("tenant"), "{}", answer.body);
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_local_auth_disabled_the_key_is_refused_and_a_token_works() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let entra = issuer().await;
        let sim = endpoint(&entra, false).await;
        let by_key = Rest::new(&sim.endpoint(), sim.key())
            .send(Method::POST, DOCS, &upsert_headers(), doc(1))
            .await;
        assert_eq!(by_key.status, 401, "{}", by_key.body);
        assert_eq!(
            message(&by_key),
            "Local Authorization is disabled. Use an AAD token to authorize all requests."
        );
        let writer = Rest::with_token(
            &sim.endpoint(),
            &token(&entra, "writer", COSMOS_AUDIENCE).await,
        );
        let written = writer
            .send(Method::POST, DOCS, &upsert_headers(), doc(1))
            .await;
        assert_eq!(written.status, 201, "{}", written.body);
        assert_eq!(read(&writer).await.body["seq"], 1);
        // Without a trusted issuer, nobody could get in: such an endpoint does not start.
        assert!(
            CosmosSim::builder()
                .local_auth(false)
                .start()
                .await
                .is_err()
        );
    })
    .await
    .expect("bounded");
}

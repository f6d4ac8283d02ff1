//! The harness's `@vercel/cosmosdb-server` over the Cosmos REST API, over HTTP and
//! HTTPS, and its cleanup.

use reqwest::{Client, Method, RequestBuilder, StatusCode};
use serde_json::{Value, json};
use test_harness::{CosmosDbServer, process_running};

/// Adds the headers every Cosmos REST request carries. The server does not check the
/// signature, so a well-formed placeholder stands in for it.
fn cosmos_request(client: &Client, method: Method, endpoint: &str, path: &str) -> RequestBuilder {
    client
        .request(method, format!("{endpoint}{path}"))
        .header(
            "authorization",
            "type%3Dmaster%26ver%3D1.0%26sig%3DAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA%3D",
        )
        .header("x-ms-date", "Sun, 22 Nov 2026 02:00:00 GMT")
        .header("x-ms-version", "2020-07-15")
}

async fn send(request: RequestBuilder, expected: StatusCode) -> Value {
    let response = request.send().await.expect("request reaches the server");
    let status = response.status();
    let body: Value = response.json().await.expect("JSON body");
    assert_eq!(status, expected, "unexpected answer: {body}");
    body
}

/// Creates a database, a container partitioned on `/deviceId` and a document, then
/// reads the document back by id and partition key.
async fn write_and_read_back(server: &CosmosDbServer, client: &Client) {
    let endpoint = server.endpoint();
    let partition_key = r#"["drone-1"]"#;

    send(
        cosmos_request(client, Method::POST, &endpoint, "/dbs").json(&json!({"id": "telemetry"})),
        StatusCode::CREATED,
    )
    .await;
    send(
        cosmos_request(client, Method::POST, &endpoint, "/dbs/telemetry/colls").json(&json!({
            "id": "positions",
            "partitionKey": {"paths": ["/deviceId"], "kind": "Hash", "version": 2}
        })),
        StatusCode::CREATED,
    )
    .await;
    let document = json!({
        "id": "drone-1",
        "deviceId": "drone-1",
        "location": {"type": "Point", "coordinates": [-122.12, 47.66]}
    });
    send(
        cosmos_request(
            client,
            Method::POST,
            &endpoint,
            "/dbs/telemetry/colls/positions/docs",
        )
        .header("x-ms-documentdb-partitionkey", partition_key)
        .json(&document),
        StatusCode::CREATED,
    )
    .await;

    let read = send(
        cosmos_request(
            client,
            Method::GET,
            &endpoint,
            "/dbs/telemetry/colls/positions/docs/drone-1",
        )
        .header("x-ms-documentdb-partitionkey", partition_key),
        StatusCode::OK,
    )
    .await;
    assert_eq!(read["deviceId"], "drone-1");
    assert_eq!(read["location"], document["location"]);
}

#[tokio::test]
async fn document_round_trip_over_http() {
    let server = CosmosDbServer::start().expect("start cosmosdb-server");
    assert_eq!(
        server.endpoint(),
        format!("http://127.0.0.1:{}", server.port())
    );
    let client = Client::new();
    write_and_read_back(&server, &client).await;

    // The launcher asks for keep-alive; the package's default closes every connection.
    let response = cosmos_request(&client, Method::GET, &server.endpoint(), "/")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["connection"], "keep-alive");
}

#[tokio::test]
async fn document_round_trip_over_https() {
    let server = CosmosDbServer::start_https().expect("start cosmosdb-server");
    assert_eq!(
        server.endpoint(),
        format!("https://127.0.0.1:{}", server.port())
    );
    let client = Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    write_and_read_back(&server, &client).await;
}

#[test]
fn server_is_gone_after_drop() {
    let server = CosmosDbServer::start().expect("start cosmosdb-server");
    let pid = server.pid();
    assert!(process_running(pid));
    drop(server);
    assert!(!process_running(pid));
}

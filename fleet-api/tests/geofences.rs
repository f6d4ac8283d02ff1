//! Geofences against the local Cosmos endpoint: none before the first (no container yet), a
//! polygon and an Azure Maps circle written, read back, listed by id, replaced, deleted; bad
//! shapes and ids refused with what is wrong; the documents stored where the setting says.

mod common;

use std::time::Duration;

use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::{Access, AccessConfig, ApiKeys, Role, key_line};
use serde_json::{Value, json};

const ADMIN_KEY: &str = "admin-key-0123456789-0123456789-0123456789";

async fn send(method: reqwest::Method, url: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .header("X-API-Key", ADMIN_KEY);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_are_written_read_listed_replaced_and_deleted() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let sim = CosmosSim::unthrottled().await.unwrap();
        let cosmos = client(&sim.endpoint(), sim.key());
        let c = container(&cosmos, "positions").await;
        let keys = ApiKeys::parse(&key_line("ops", Role::Admin, ADMIN_KEY).unwrap()).unwrap();
        let access = Access::start(AccessConfig {
            keys,
            oidc: None,
            anonymous: false,
        })
        .await
        .unwrap();
        let (base, _stop) = serve_with(c, ApiOptions::default(), access).await;
        let all = format!("{base}/api/geofences");
        let get = reqwest::Method::GET;
        let put = reqwest::Method::PUT;

        assert_eq!(
            send(get.clone(), &all, None).await,
            (200, json!({"type": "FeatureCollection", "features": []}))
        );
        let square = json!({"type": "Polygon", "coordinates": [[[-122.2, 47.6], [-122.1, 47.6], [-122.1, 47.7], [-122.2, 47.7], [-122.2, 47.6]]]});
        let (status, body) = send(put.clone(), &format!("{all}/zone-b"), Some(square)).await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["geometry"]["type"], "Polygon");
        let circle = json!({
            "type": "Feature",
            "geometry": {"type": "Point", "coordinates": [-122.12, 47.66]},
            "properties": {"subType": "Circle", "radius": 750}
        });
        assert_eq!(send(put.clone(), &format!("{all}/zone-a"), Some(circle.clone())).await.0, 201);
        let (status, body) = send(get.clone(), &format!("{all}/zone-a"), None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["id"], "zone-a");
        assert_eq!(body["geometry"], circle["geometry"]);
        assert_eq!(body["properties"]["subType"], "Circle");
        assert_eq!(body["properties"]["radius"], 750.0);
        assert!(body["properties"]["updatedAt"].is_string(), "{body}");

        let (_, listed) = send(get.clone(), &all, None).await;
        let ids: Vec<&str> = listed["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["zone-a", "zone-b"]);
        // Stored in their own container, keyed by id.
        let stored = cosmos.container("telemetry", "geofences").read("zone-a", "zone-a").await;
        assert!(stored.unwrap().is_some());

        // Replaced: the same id answers 200 and the new shape.
        let wider = json!({
            "type": "Feature",
            "geometry": {"type": "Point", "coordinates": [-122.12, 47.66]},
            "properties": {"subType": "Circle", "radius": 1500}
        });
        assert_eq!(send(put.clone(), &format!("{all}/zone-a"), Some(wider)).await.0, 200);
        let (_, body) = send(get.clone(), &format!("{all}/zone-a"), None).await;
        assert_eq!(body["properties"]["radius"], 1500.0);

        let delete = reqwest::Method::DELETE;
        assert_eq!(send(delete.clone(), &format!("{all}/zone-a"), None).await.0, 204);
        assert_eq!(send(delete, &format!("{all}/zone-a"), None).await.0, 404);
        assert_eq!(send(get.clone(), &format!("{all}/zone-a"), None).await.0, 404);

        // Bad input says what is wrong.
        let (status, body) = send(
            put.clone(),
            &format!("{all}/zone-c"),
            Some(json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [0, 0]}, "properties": {"subType": "Circle", "radius": -1}})),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert!(body["message"].as_str().unwrap().contains("radius"), "{body}");
        let (status, _) = send(put, &format!("{all}/a%3Fb"), Some(json!({}))).await;
        assert_eq!(status, 400);
        sim.shutdown().await;
    })
    .await
    .expect("bounded");
}

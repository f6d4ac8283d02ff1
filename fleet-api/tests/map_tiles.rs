//! The base map of a tile server that takes a credential, as Azure Maps does: the `fleet-api`
//! binary fetches the tiles for the page (`/map/tiles/{z}/{x}/{y}`) and adds the credential,
//! and the page loads tiles from its own origin only. Against a local tile server that keeps
//! every request: with `MAP_TILE_KEY`, every tile request carries the key in
//! `subscription-key`, none comes from the browser, and the key is in nothing the browser
//! gets (page, policy, configuration, DOM); with `MAP_TILE_CLIENT_ID`, every tile request
//! carries an Entra ID token of the API's identity from the local issuer (`entra-sim`), checked
//! as Azure Maps checks it (signature, issuer, audience `https://atlas.microsoft.com`), and
//! the account's client id in `x-ms-client-id`. The route checks z/x/y, refuses what is not
//! an image or is too large, passes 404 on, and serves a tile asked again from its cache.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, Uri, header};
use common::binary::start_binary;
use common::*;
use cosmos_sim::CosmosSim;
use entra_sim::{App, EntraSim};
use serde::Deserialize;
use test_harness::Chromium;

/// The Azure Maps key the tile server expects.
const KEY: &str = "maps-key+/=Zk9";
/// The Azure Maps account's client id.
const MAPS_ACCOUNT: &str = "5b0f3c9e-2d4a-4e71-9a3c-8f1e6d2b7a40";

/// A request the tile server got.
#[derive(Debug, Clone)]
struct Asked {
    uri: String,
    headers: HeaderMap,
}

type Seen = Arc<Mutex<Vec<Asked>>>;

/// A tile server on a free port, answering as Azure Maps Render's `map/tile` does: a PNG for
/// each tile, except zoom 5 (an HTML page), 6 (2 MiB) and 7 (404). Every request is kept.
async fn tile_server() -> (String, Seen) {
    // A 1×1 grey PNG.
    const PNG: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a,
        0x7e, 0x9b, 0x55, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x38,
        0x01, 0x00, 0x00, 0xca, 0x00, 0xc9, 0x34, 0x42, 0x27, 0xf3, 0x00, 0x00, 0x00, 0x00, 0x49,
        0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
    let seen: Seen = Arc::default();
    let app = axum::Router::new().fallback({
        let seen = seen.clone();
        move |uri: Uri, headers: HeaderMap| async move {
            let uri = uri.to_string();
            seen.lock().unwrap().push(Asked {
                uri: uri.clone(),
                headers,
            });
            let png = [(header::CONTENT_TYPE, "image/png")];
            if uri.contains("zoom=5&") {
                (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "text/html")],
                    b"<script>".to_vec(),
                )
            } else if uri.contains("zoom=6&") {
                (StatusCode::OK, png, vec![0u8; 2 << 20])
            } else if uri.contains("zoom=7&") {
                (StatusCode::NOT_FOUND, png, Vec::new())
            } else {
                (StatusCode::OK, png, PNG.to_vec())
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

/// Azure Maps Render's raster tile URL at the tile server `base`.
fn render_template(base: &str) -> String {
    format!(
        "{base}/map/tile?api-version=2024-04-01&tilesetId=microsoft.base.road&zoom={{z}}&x={{x}}&y={{y}}"
    )
}

/// GET the API's tile z/x/y: status, content type, cache control.
async fn api_tile(base: &str, z: i64, x: i64, y: i64) -> (u16, String, String) {
    let r = reqwest::get(format!("{base}/map/tiles/{z}/{x}/{y}"))
        .await
        .unwrap();
    let header = |name| {
        r.headers()
            .get(name)
            .map_or(String::new(), |v| v.to_str().unwrap().to_string())
    };
    let (content_type, cache) = (header(header::CONTENT_TYPE), header(header::CACHE_CONTROL));
    (r.status().as_u16(), content_type, cache)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_asks_a_keyed_tile_server_and_the_browser_never_sees_the_key() {
    let chromium = Chromium::find().unwrap_or_else(|e| {
        panic!("the map test needs Debian's chromium: {e} (./scripts/test-all installs it)")
    });
    let (tiles, seen) = tile_server().await;
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    seed_latest(&c, &scatter(20, 0x7113)).await;
    let template = render_template(&tiles);
    let api = start_binary(
        &sim,
        &[
            ("API_ALLOW_ANONYMOUS", "true"),
            ("MAP_UPDATES", "poll"),
            ("MAP_TILE_URL", template.as_str()),
            ("MAP_TILE_ATTRIBUTION", "© Test Maps"),
            ("MAP_TILE_KEY", KEY),
        ],
    );

    let page = reqwest::get(format!("{}/", api.base)).await.unwrap();
    let policy = page.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_string();
    assert!(policy.ends_with("; img-src 'self' blob:"), "{policy}");
    let config = reqwest::get(format!("{}/map/config.json", api.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        config.contains("\"url\":\"/map/tiles/{z}/{x}/{y}\""),
        "{config}"
    );
    for given in [&page.text().await.unwrap(), &policy, &config] {
        assert!(!given.contains(KEY) && !given.contains(&tiles), "{given}");
    }

    let url = format!("{}/", api.base);
    let dom = tokio::task::spawn_blocking(move || chromium.dump_dom(&url, Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert!(
        dom.contains("data-tiles-loaded="),
        "no base map loaded: {dom}"
    );
    assert!(dom.contains("src=\"blob:"), "no tile shown: {dom}");
    assert!(dom.contains("© Test Maps"), "no attribution: {dom}");
    assert!(!dom.contains(KEY) && !dom.contains(&tiles), "{dom}");
    let asked = seen.lock().unwrap().clone();
    assert!(!asked.is_empty(), "the tile server was not asked");
    for a in &asked {
        assert_eq!(a.headers["subscription-key"], KEY, "{}", a.uri);
        assert!(
            !a.uri.contains("subscription-key"),
            "the key in the URL: {}",
            a.uri
        );
        let agent = a.headers.get(header::USER_AGENT);
        assert!(
            agent.is_none_or(|ua| !ua.to_str().unwrap().contains("Chrome")),
            "the browser asked the tile server: {a:?}"
        );
    }

    // Asked twice, a tile is fetched once and may be kept by the browser.
    let before = seen.lock().unwrap().len();
    for _ in 0..2 {
        let (status, content_type, cache) = api_tile(&api.base, 3, 2, 1).await;
        assert_eq!((status, content_type.as_str()), (200, "image/png"));
        assert_eq!(cache, "private, max-age=3600");
    }
    let after = seen.lock().unwrap()[before..].to_vec();
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(after[0].uri.contains("&zoom=3&x=2&y=1"), "{}", after[0].uri);

    // Outside the grid: refused before the tile server is asked.
    for (z, x, y) in [(23, 0, 0), (2, 4, 0), (2, 0, -1)] {
        assert_eq!(api_tile(&api.base, z, x, y).await.0, 400, "{z}/{x}/{y}");
    }
    assert_eq!(seen.lock().unwrap().len(), before + 1);
    // Not an image, too large: 502; none there: 404.
    assert_eq!(api_tile(&api.base, 5, 0, 0).await.0, 502);
    assert_eq!(api_tile(&api.base, 6, 0, 0).await.0, 502);
    assert_eq!(api_tile(&api.base, 7, 0, 0).await.0, 404);
    let metrics = reqwest::get(format!("{}/metrics", api.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "fleet_api_map_tiles_total{source=\"cache\"} 1",
        "fleet_api_map_tiles_total{source=\"failed\"} 2",
        "fleet_api_map_tiles_total{source=\"missing\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in {metrics}");
    }
    drop(api);
    sim.shutdown().await;
}

/// The claims Azure Maps reads of the token: who it was issued to (`appid` in v1.0 tokens,
/// `azp` in v2.0).
#[derive(Debug, Deserialize)]
struct Claims {
    appid: Option<String>,
    azp: Option<String>,
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_asks_azure_maps_with_its_entra_token_and_the_account_client_id() {
    const API_APP: &str = "3c7a1e90-4b2d-4f6e-8a15-9d0c2e7b5f13";
    const SECRET: &str = "api-secret~value";
    const AZURE_MAPS: &str = "https://atlas.microsoft.com";
    let entra = EntraSim::builder()
        .app(App::new("azure-maps").app_id_uri(AZURE_MAPS))
        .app(App::new(API_APP).secret(SECRET))
        .https()
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("issuer-ca.pem");
    std::fs::write(&ca, entra.ca_pem().unwrap()).unwrap();
    let (tiles, seen) = tile_server().await;
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
    seed_latest(&c, &scatter(5, 0xe7a)).await;
    let template = render_template(&tiles);
    let api = start_binary(
        &sim,
        &[
            ("API_ALLOW_ANONYMOUS", "true"),
            ("MAP_TILE_URL", template.as_str()),
            ("MAP_TILE_CLIENT_ID", MAPS_ACCOUNT),
            ("AZURE_CREDENTIAL", "secret"),
            ("SSL_CERT_FILE", ca.to_str().unwrap()),
            ("AZURE_AUTHORITY_HOST", entra.base_url()),
            ("AZURE_TENANT_ID", entra.tenant_id()),
            ("AZURE_CLIENT_ID", API_APP),
            ("AZURE_CLIENT_SECRET", SECRET),
        ],
    );

    for (z, x, y) in [(3, 2, 1), (4, 5, 6)] {
        let (status, content_type, _) = api_tile(&api.base, z, x, y).await;
        assert_eq!(
            (status, content_type.as_str()),
            (200, "image/png"),
            "{z}/{x}/{y}"
        );
    }
    let verifier =
        oidc_verify::Verifier::discover(entra.issuer(), vec![AZURE_MAPS.into()], entra.ca_pem())
            .await
            .unwrap();
    let asked = seen.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    for a in &asked {
        assert_eq!(a.headers["x-ms-client-id"], MAPS_ACCOUNT, "{}", a.uri);
        assert!(a.headers.get("subscription-key").is_none());
        let token = a.headers[header::AUTHORIZATION]
            .to_str()
            .unwrap()
            .strip_prefix("Bearer ")
            .unwrap_or_else(|| panic!("not a bearer token: {a:?}"));
        let claims: Claims = verifier
            .verify(token)
            .await
            .unwrap_or_else(|e| panic!("Azure Maps would refuse the token: {e:?}"));
        assert_eq!(
            claims.appid.or(claims.azp).as_deref(),
            Some(API_APP),
            "the token is not the API's"
        );
    }
    let config = reqwest::get(format!("{}/map/config.json", api.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !config.contains(MAPS_ACCOUNT) && !config.contains("Bearer"),
        "{config}"
    );
    drop(api);
    sim.shutdown().await;
}

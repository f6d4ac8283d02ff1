//! The base map's tiles fetched by the API for the page (`GET /map/tiles/{z}/{x}/{y}`), when
//! the tile server takes a credential the browser must not see: Azure Maps' shared key, or
//! an Entra ID token of the API's own identity ([`TileAuth`]). The page then loads tiles from
//! its own origin only. A keyless public tile server is not proxied: the page loads its
//! tiles directly, which costs the API nothing ([`crate::map`]).
//!
//! Each request is bounded: the route needs `Fleet.Read` (so only those who may see the
//! fleet spend the tile quota); z/x/y are checked against the grid ([`TileId`]); each caller
//! gets [`TILES_PER_SEC`] tiles a second after a burst of [`TILES_BURST`] (429 with
//! `Retry-After` beyond); the tile server must answer an image of at most
//! [`MAX_TILE_BYTES`] within [`FETCH_WITHIN`], and is not followed to another address.
//!
//! Cost: a tile served from the cache ([`CACHE_BYTES`], [`CACHE_FOR`]) costs one map lookup;
//! a fetched one is one tile server request (Azure Maps bills Render tiles per request) and
//! its bytes through the API. `fleet_api_map_tiles` counts both. Two viewers asking for the
//! same tile before it is kept both fetch it (no coalescing: a map's tiles are few).

mod cache;
mod rate;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use entra_credential::EntraCredential;
use serde_json::json;

use crate::access::{Access, Role, guarded};
use crate::caps::Who;
use crate::metrics::{Metrics, TileSource};
use cache::{Tile, TileCache, TileId};
use rate::TileRate;

/// The scope of an Entra ID token for Azure Maps' data plane.
pub const AZURE_MAPS_SCOPE: &str = "https://atlas.microsoft.com/.default";
/// The template the page asks for proxied tiles by.
pub const PAGE_TEMPLATE: &str = "/map/tiles/{z}/{x}/{y}";
/// Largest tile taken from the tile server (Azure Maps' 512-pixel raster tiles are well under).
pub const MAX_TILE_BYTES: usize = 1024 * 1024;
/// Longest a tile fetch may take, answer and body.
pub const FETCH_WITHIN: Duration = Duration::from_secs(10);
/// Bytes of tiles kept in memory.
pub const CACHE_BYTES: usize = 32 * 1024 * 1024;
/// How long a tile is served from the cache, and may be kept by the browser.
pub const CACHE_FOR: Duration = Duration::from_secs(3600);
/// Tiles a second each caller may ask for, after its burst.
pub const TILES_PER_SEC: f64 = 50.0;
/// Tiles each caller may ask for at once (a full-screen view and a zoom are about 100).
pub const TILES_BURST: f64 = 400.0;

/// How the tile server is asked for tiles.
#[derive(Debug, Clone)]
pub enum TileAuth {
    /// Without a credential: the page loads the tiles from the server itself.
    None,
    /// Azure Maps' shared key (`MAP_TILE_KEY`), sent in the `subscription-key` header.
    Key(settings::Secret),
    /// An Entra ID token of the API's identity for `AZURE_MAPS_SCOPE` as the bearer, and the
    /// Maps account's client id (`MAP_TILE_CLIENT_ID`) in `x-ms-client-id`.
    Entra {
        /// The Azure Maps account's client id.
        client_id: String,
        /// The API's identity.
        credential: Arc<EntraCredential>,
    },
}

impl PartialEq for TileAuth {
    /// The same kind with the same key or account (there is one identity per process).
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (TileAuth::None, TileAuth::None) => true,
            (TileAuth::Key(a), TileAuth::Key(b)) => a.expose() == b.expose(),
            (TileAuth::Entra { client_id: a, .. }, TileAuth::Entra { client_id: b, .. }) => a == b,
            _ => false,
        }
    }
}

/// The map's base map: XYZ raster tiles (`MAP_TILE_URL`), their attribution, and how the
/// tile server is asked ([`TileAuth`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MapTiles {
    /// The URL template with `{z}`, `{x}` and `{y}`.
    pub template: String,
    /// The tile server's origin, the only other one the page may load images from when it
    /// loads the tiles itself.
    pub origin: String,
    /// What the map shows in its corner, as the tile provider asks.
    pub attribution: String,
    /// The credential tile requests carry: with one, the API fetches the tiles for the page
    /// (`routes`), so that the page never holds it.
    pub auth: TileAuth,
}

impl MapTiles {
    /// Whether the API fetches the tiles for the page.
    pub fn proxied(&self) -> bool {
        self.auth != TileAuth::None
    }

    /// The template the page asks for tiles by.
    pub(crate) fn page_template(&self) -> &str {
        if self.proxied() {
            PAGE_TEMPLATE
        } else {
            &self.template
        }
    }
}

/// What the tile route shares.
#[derive(Debug)]
struct Proxy {
    template: String,
    auth: TileAuth,
    client: reqwest::Client,
    cache: TileCache,
    rate: TileRate,
    metrics: Arc<Metrics>,
}

/// Why a tile was not fetched.
#[derive(Debug)]
enum Failure {
    /// The tile server has no such tile (404).
    NotFound,
    /// Anything else; the detail is logged, the caller is told 502.
    Server(String),
}

/// The tile route, for callers holding `Fleet.Read` by `access`, when `tiles` takes a
/// credential; otherwise none.
pub fn routes<S>(tiles: Option<&MapTiles>, access: &Access, metrics: Arc<Metrics>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let Some(tiles) = tiles.filter(|t| t.proxied()) else {
        return Router::new();
    };
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(FETCH_WITHIN)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        // The Cosmos DB client, built before the router, loads the same roots and stops the
        // program with a message when it cannot.
        .expect("the TLS roots load");
    let proxy = Arc::new(Proxy {
        template: tiles.template.clone(),
        auth: tiles.auth.clone(),
        client,
        cache: TileCache::new(CACHE_BYTES, CACHE_FOR),
        rate: TileRate::new(TILES_PER_SEC, TILES_BURST),
        metrics,
    });
    Router::new()
        .route(
            "/map/tiles/:z/:x/:y",
            guarded(access, Role::Read, get(tile)),
        )
        .with_state(proxy)
}

fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": code, "message": message})),
    )
        .into_response()
}

async fn tile(
    State(proxy): State<Arc<Proxy>>,
    Path((z, x, y)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    let id = match TileId::parse(&z, &x, &y) {
        Ok(id) => id,
        Err(message) => return refusal(StatusCode::BAD_REQUEST, "bad_request", &message),
    };
    if let Err(wait) = proxy.rate.take(&Who::of(request.extensions())) {
        proxy.metrics.record_tile(TileSource::Refused);
        let mut response = refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_tiles",
            &format!(
                "at most {TILES_PER_SEC} tiles a second per caller; try again after Retry-After"
            ),
        );
        let secs = wait.as_secs_f64().ceil().max(1.0).to_string();
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&secs).expect("a number is a header value"),
        );
        return response;
    }
    let tile = match proxy.cache.get(id) {
        Some(tile) => {
            proxy.metrics.record_tile(TileSource::Cache);
            tile
        }
        None => match proxy.fetch(id).await {
            Ok(tile) => {
                proxy.metrics.record_tile(TileSource::Server);
                proxy.cache.put(id, tile.clone());
                tile
            }
            Err(Failure::NotFound) => {
                proxy.metrics.record_tile(TileSource::Missing);
                return refusal(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "the tile server has no such tile",
                );
            }
            Err(Failure::Server(detail)) => {
                proxy.metrics.record_tile(TileSource::Failed);
                tracing::warn!(z = id.z, x = id.x, y = id.y, error = %detail, "tile fetch failed");
                return refusal(
                    StatusCode::BAD_GATEWAY,
                    "tile_server",
                    "the tile server gave no usable tile",
                );
            }
        },
    };
    let max_age = format!("private, max-age={}", CACHE_FOR.as_secs());
    (
        [
            (header::CONTENT_TYPE, tile.content_type),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_str(&max_age).expect("ASCII"),
            ),
        ],
        tile.body,
    )
        .into_response()
}

impl Proxy {
    /// Tile `id` from the tile server, with the credential.
    async fn fetch(&self, id: TileId) -> Result<Tile, Failure> {
        let url = self
            .template
            .replace("{z}", &id.z.to_string())
            .replace("{x}", &id.x.to_string())
            .replace("{y}", &id.y.to_string());
        let mut request = self.client.get(url);
        match &self.auth {
            TileAuth::None => {}
            TileAuth::Key(key) => request = request.header("subscription-key", key.expose()),
            TileAuth::Entra {
                client_id,
                credential,
            } => {
                let token = credential
                    .token(AZURE_MAPS_SCOPE)
                    .await
                    .map_err(|e| Failure::Server(e.to_string()))?;
                request = request
                    .bearer_auth(token)
                    .header("x-ms-client-id", client_id);
            }
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| Failure::Server(format!("no answer: {e}")))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(Failure::NotFound);
        }
        if !status.is_success() {
            if let (401 | 403, TileAuth::Entra { credential, .. }) = (status.as_u16(), &self.auth) {
                credential.renew();
            }
            return Err(Failure::Server(format!("answered {status}")));
        }
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .filter(|t| t.to_str().is_ok_and(|t| t.starts_with("image/")))
            .cloned()
            .ok_or_else(|| Failure::Server("answered something else than an image".into()))?;
        if response
            .content_length()
            .is_some_and(|n| n > MAX_TILE_BYTES as u64)
        {
            return Err(Failure::Server(format!(
                "a tile larger than {MAX_TILE_BYTES} bytes"
            )));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| Failure::Server(format!("the tile's body: {e}")))?
        {
            if body.len() + chunk.len() > MAX_TILE_BYTES {
                return Err(Failure::Server(format!(
                    "a tile larger than {MAX_TILE_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Tile {
            content_type,
            body: Bytes::from(body),
        })
    }
}

//! The live map: its page, scripts and styles, and Leaflet (vendored in `vendor/leaflet/`),
//! embedded in the binary; its base map ([`MapTiles`]); how it learns of
//! the fleet's moves ([`MapUpdates`]: the live stream, or polling); how it signs in
//! (`/map/config.json`: the issuer, client id and scope of the authorization code flow with
//! PKCE that `signin.js` runs); and the content security policy that lets the page load and
//! run only these files of its own origin (no inline script or style, nothing from
//! elsewhere), load images from a keyless tile server (or, when the API fetches the tiles,
//! from its own origin only: [`crate::tiles`]), and talk to the issuer.
//!
//! The map's files are open to everyone: they carry no positions, and a browser must load
//! them before it can sign in. The data they ask for is behind the API's roles.

use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use serde::{Deserialize, Serialize};

pub use crate::tiles::MapTiles;

/// The page, with `__UPDATES__` standing for how it follows the fleet and `__REFRESH_MS__`
/// for the polling interval.
const PAGE: &str = include_str!("map.html");
const SCRIPT: &str = include_str!("map.js");
const SIGN_IN: &str = include_str!("signin.js");
const STYLES: &str = include_str!("map.css");
/// Leaflet 1.9.4 (BSD-2-Clause, `vendor/leaflet/LICENSE`), from npm; see `vendor/leaflet/README.md`.
const LEAFLET: &str = include_str!("vendor/leaflet/leaflet.js");
const LEAFLET_STYLES: &str = include_str!("vendor/leaflet/leaflet.css");

/// The map page's policy without sign-in: its own origin's scripts, styles and API only.
pub const MAP_POLICY: &str =
    "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// How the map follows the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MapUpdates {
    /// The live stream (`/api/drones/stream`): one change-feed reader serves every open
    /// map, and a move reaches the page within about a second. The page polls only while
    /// the stream refuses it (as many viewers as `API_STREAM_MAX_CLIENTS`).
    #[default]
    Stream,
    /// `GET /api/drones` every `MAP_REFRESH`: a fan-out query over every range per open
    /// map and refresh.
    Poll,
}

impl MapUpdates {
    fn name(self) -> &'static str {
        match self {
            MapUpdates::Stream => "stream",
            MapUpdates::Poll => "poll",
        }
    }
}

/// How the map signs in: the authorization code flow with PKCE at the API's issuer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MapSignIn {
    /// The issuer (`API_OIDC_ISSUER`); its discovery document names the endpoints.
    pub issuer: String,
    /// The issuer's origin, which the page may fetch from (discovery, token endpoint).
    #[serde(skip)]
    pub issuer_origin: String,
    /// The map's client id (`API_MAP_CLIENT_ID`).
    pub client_id: String,
    /// The scope it asks for (`API_MAP_SCOPE`).
    pub scope: String,
}

/// The page's policy: with sign-in, it may also fetch from the issuer's origin; with a base
/// map, load images from the tile server.
fn policy(sign_in: Option<&MapSignIn>, tiles: Option<&MapTiles>) -> String {
    let mut policy = MAP_POLICY.to_string();
    if let Some(s) = sign_in {
        policy += &format!("; connect-src 'self' {}", s.issuer_origin);
    }
    match tiles {
        // The API's tiles, fetched with the page's credential and shown as blob: URLs.
        Some(t) if t.proxied() => policy += "; img-src 'self' blob:",
        Some(t) => policy += &format!("; img-src 'self' {}", t.origin),
        None => {}
    }
    policy
}

/// The map's routes (`/`, `/map.js`, `/signin.js`, `/map.css`, `/leaflet.js`, `/leaflet.css`,
/// `/map/config.json`), the page following the fleet by `updates`, polling every `refresh`,
/// signing in by `sign_in`, over the base map `tiles`.
pub fn routes<S>(
    updates: MapUpdates,
    refresh: Duration,
    sign_in: Option<&MapSignIn>,
    tiles: Option<&MapTiles>,
) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let page = PAGE
        .replace("__UPDATES__", updates.name())
        .replace("__REFRESH_MS__", &refresh.as_millis().to_string());
    let policy = policy(sign_in, tiles);
    let tiles = tiles.map(|t| {
        serde_json::json!({
            "url": t.page_template(),
            "attribution": t.attribution,
            "proxied": t.proxied(),
        })
    });
    let config = serde_json::json!({ "signIn": sign_in, "tiles": tiles }).to_string();
    let script = |text: &'static str| {
        get(move || async move {
            (
                [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                text,
            )
        })
    };
    let style = |text: &'static str| {
        get(move || async move { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], text) })
    };
    Router::new()
        .route(
            "/",
            get(move || async move {
                (
                    [
                        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                        (header::CONTENT_SECURITY_POLICY, policy.as_str()),
                    ],
                    page,
                )
                    .into_response()
            }),
        )
        .route("/map.js", script(SCRIPT))
        .route("/signin.js", script(SIGN_IN))
        .route("/leaflet.js", script(LEAFLET))
        .route("/map.css", style(STYLES))
        .route("/leaflet.css", style(LEAFLET_STYLES))
        .route(
            "/map/config.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], config) }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiles::TileAuth;

    #[test]
    fn signing_in_lets_the_page_reach_the_issuer_and_nothing_else() {
        assert_eq!(policy(None, None), MAP_POLICY);
        let sign_in = MapSignIn {
            issuer: "https://login.microsoftonline.com/tenant/v2.0".into(),
            issuer_origin: "https://login.microsoftonline.com".into(),
            client_id: "map".into(),
            scope: "api://fleet-api/.default".into(),
        };
        let with = policy(Some(&sign_in), None);
        assert!(with.starts_with(MAP_POLICY), "{with}");
        assert!(
            with.ends_with("; connect-src 'self' https://login.microsoftonline.com"),
            "{with}"
        );
        let config = serde_json::json!({ "signIn": Some(&sign_in) });
        assert_eq!(
            config["signIn"],
            serde_json::json!({"issuer": sign_in.issuer, "clientId": "map", "scope": "api://fleet-api/.default"})
        );
    }

    #[test]
    fn a_keyless_base_map_is_loaded_from_its_origin_and_a_keyed_one_from_the_api() {
        let public = MapTiles {
            template: "http://127.0.0.1:9/{z}/{x}/{y}.png".into(),
            origin: "http://127.0.0.1:9".into(),
            attribution: "© Test".into(),
            auth: TileAuth::None,
        };
        assert_eq!(
            policy(None, Some(&public)),
            format!("{MAP_POLICY}; img-src 'self' http://127.0.0.1:9")
        );
        assert_eq!(public.page_template(), public.template);
        let keyed = MapTiles {
            template: "https://atlas.microsoft.com/map/tile?api-version=2024-04-01&tilesetId=microsoft.base.road&zoom={z}&x={x}&y={y}".into(),
            origin: "https://atlas.microsoft.com".into(),
            auth: TileAuth::Key(settings::Secret::new("k+y/=")),
            ..public
        };
        assert_eq!(
            policy(None, Some(&keyed)),
            format!("{MAP_POLICY}; img-src 'self' blob:"),
            "the tile server's origin is not the page's to reach"
        );
        assert_eq!(keyed.page_template(), "/map/tiles/{z}/{x}/{y}");
        assert!(!format!("{keyed:?}").contains("k+y"), "the key in Debug");
    }
}

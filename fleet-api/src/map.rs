//! The live map: its page, scripts and styles, embedded in the binary; how it learns of
//! the fleet's moves ([`MapUpdates`]: the live stream, or polling); how it signs in
//! (`/map/config.json`: the issuer, client id and scope of the authorization code flow with
//! PKCE that `signin.js` runs); and the content security policy that lets the page load and
//! run only these files of its own origin (no inline script or style, nothing from
//! elsewhere) and talk to the issuer.
//!
//! The map's files are open to everyone: they carry no positions, and a browser must load
//! them before it can sign in. The data they ask for is behind the API's roles.

use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use serde::{Deserialize, Serialize};

/// The page, with `__UPDATES__` standing for how it follows the fleet and `__REFRESH_MS__`
/// for the polling interval.
const PAGE: &str = include_str!("map.html");
const SCRIPT: &str = include_str!("map.js");
const SIGN_IN: &str = include_str!("signin.js");
const STYLES: &str = include_str!("map.css");

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

/// The page's policy: with sign-in, it may also fetch from the issuer's origin.
fn policy(sign_in: Option<&MapSignIn>) -> String {
    match sign_in {
        None => MAP_POLICY.to_string(),
        Some(s) => format!("{MAP_POLICY}; connect-src 'self' {}", s.issuer_origin),
    }
}

/// The map's routes (`/`, `/map.js`, `/signin.js`, `/map.css`, `/map/config.json`), the page
/// following the fleet by `updates`, polling every `refresh`, signing in by `sign_in`.
pub fn routes<S>(updates: MapUpdates, refresh: Duration, sign_in: Option<&MapSignIn>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let page = PAGE
        .replace("__UPDATES__", updates.name())
        .replace("__REFRESH_MS__", &refresh.as_millis().to_string());
    let policy = policy(sign_in);
    let config = serde_json::json!({ "signIn": sign_in }).to_string();
    let script = |text: &'static str| {
        get(move || async move {
            (
                [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                text,
            )
        })
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
        .route(
            "/map.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLES) }),
        )
        .route(
            "/map/config.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], config) }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signing_in_lets_the_page_reach_the_issuer_and_nothing_else() {
        assert_eq!(policy(None), MAP_POLICY);
        let sign_in = MapSignIn {
            issuer: "https://login.microsoftonline.com/tenant/v2.0".into(),
            issuer_origin: "https://login.microsoftonline.com".into(),
            client_id: "map".into(),
            scope: "api://fleet-api/.default".into(),
        };
        let with = policy(Some(&sign_in));
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
}

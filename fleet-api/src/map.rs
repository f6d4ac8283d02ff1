//! The live map: its page, script and styles, embedded in the binary, and the content
//! security policy that lets the page load and run only these files of its own origin
//! (no inline script or style, nothing from elsewhere).

use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get};

/// The page, with `__REFRESH_MS__` standing for the refresh interval.
const PAGE: &str = include_str!("map.html");
const SCRIPT: &str = include_str!("map.js");
const STYLES: &str = include_str!("map.css");

/// The map page's policy: its own origin's script, styles and API only.
pub const MAP_POLICY: &str =
    "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The map's routes (`/`, `/map.js`, `/map.css`), each wrapped by `guard`, the page
/// refreshing every `refresh`.
pub fn routes<S>(refresh: Duration, guard: impl Fn(MethodRouter<S>) -> MethodRouter<S>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let page = PAGE.replace("__REFRESH_MS__", &refresh.as_millis().to_string());
    Router::new()
        .route(
            "/",
            guard(get(move || {
                let page = page.clone();
                async move {
                    (
                        [
                            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                            (header::CONTENT_SECURITY_POLICY, MAP_POLICY),
                        ],
                        page,
                    )
                        .into_response()
                }
            })),
        )
        .route(
            "/map.js",
            guard(get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    SCRIPT,
                )
            })),
        )
        .route(
            "/map.css",
            guard(get(|| async {
                ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLES)
            })),
        )
}

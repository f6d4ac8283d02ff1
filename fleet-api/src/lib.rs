//! The read side of the fleet: an HTTP API that answers which drones are near a point or
//! inside an area, reads one drone and its recent track, and serves a live map of the fleet,
//! all from the Cosmos DB container the cloud writer fills.
//!
//! - `config`: settings (flags, environment, TOML), resolved like the writer's;
//! - `access`: who may see the fleet: credentials, roles, and each route's guard;
//! - `geo`: the areas a request names, checked;
//! - `geofences`: the fences operators name, kept in their own container;
//! - `alerts`: the last alerts, as the alerter records them;
//! - `reads`: the Cosmos DB queries and point reads, with their cost;
//! - `track`: a page of a drone's track, from history documents and track segments;
//! - `resource_id`: the id a route takes from its path, checked once for every route;
//! - `upstream`: what a caller is told when Cosmos DB fails (the detail is logged);
//! - `feed`: the fleet as the change feed tells it, one follower for every viewer;
//! - `stream`: the live stream of the fleet (server-sent events);
//! - `api`: the routes, the cost headers;
//! - `intake`: a request's client address, its whole body and its time bound;
//! - `budget`: each caller's RU budget and the caps on fan-out queries at once;
//! - `caps`: who a request is charged to, and what one caller may hold at once;
//! - `map`: the embedded map page, its script and styles, and its content security policy;
//! - `tiles`: the base map's tiles fetched for the page when the tile server takes a key
//!   or a token;
//! - `browser`: CORS and the security headers of every answer;
//! - `audit`: one log line per request with who asked, and the count per route and role;
//! - `metrics`: Prometheus metrics per route;
//! - `reload`: values read from files and read again when they change (TLS, API keys);
//! - `serving`: what every connection is held to: the connection cap, header and stall
//!   timeouts, plain or over TLS;
//! - `tls`: HTTPS from certificate and key files, reloaded when they change.
//!
//! Running the API in-process (the demo does):
//! ```no_run
//! # async fn demo(container: cosmos::ContainerClient) -> std::io::Result<()> {
//! let access = fleet_api::Access::anonymous();
//! let router = fleet_api::router(container, fleet_api::ApiOptions::default(), access);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let stop = tokio_util::sync::CancellationToken::new();
//! fleet_api::serve(listener, router, stop).await
//! # }
//! ```

mod access;
mod alerts;
mod api;
mod audit;
mod browser;
mod budget;
mod caps;
mod config;
mod feed;
mod geo;
mod geofences;
mod intake;
mod map;
mod metrics;
mod reads;
mod reload;
mod resource_id;
mod serving;
mod stream;
mod tiles;
mod tls;
mod track;
mod upstream;

use std::sync::Arc;

pub use access::{Access, AccessConfig, ApiKeys, OidcSettings, Role, key_line};
pub use api::{MAX_LIMIT, serve};
pub use budget::RuBudget;
pub use config::{ApiConfig, ApiOptions, Settings, map_tiles};
pub use geo::{LonLat, MAX_BODY_BYTES};
pub use geofences::{FenceSet, Geofences};
pub use map::MapTiles;
pub use reads::Reads;
pub use serving::{Serving, serve as serve_within};
pub use tiles::TileAuth;
pub use tls::{TlsFiles, serve as serve_tls, server_config};
pub use track::request::TrackLimits;
pub use track::{Span, TrackRequest};

/// The API's router over `container`, letting callers in by `access`, with its own metrics;
/// its Cosmos DB requests carry `options.priority`.
pub fn router(
    container: cosmos::ContainerClient,
    options: ApiOptions,
    access: Access,
) -> axum::Router {
    let query = cosmos::QueryOptions {
        max_parallelism: options.max_parallelism,
        max_item_count: Some(options.page_size),
    };
    let fences = container
        .client()
        .container(container.database(), &options.geofence_container)
        .with_priority(options.priority)
        .with_throttle_wait(options.throttle_wait);
    let geofences = geofences::Geofences::new(fences, options.max_radius_m);
    let alerts = alerts::Alerts::new(
        container
            .client()
            .container(container.database(), &options.alert_container)
            .with_priority(options.priority)
            .with_throttle_wait(options.throttle_wait),
    );
    let reads = reads::Reads::new(
        container
            .with_priority(options.priority)
            .with_throttle_wait(options.throttle_wait),
        query,
    );
    let mut metrics = metrics::Metrics::default();
    if let Some(failures) = access.key_file_failures() {
        metrics.count_key_file_failures(failures);
    }
    let metrics = Arc::new(metrics);
    let fleet = feed::Fleet::new(
        container.with_priority(options.priority),
        reads.clone(),
        geofences.clone(),
        metrics.clone(),
    );
    let live = stream::Live::new(
        fleet,
        metrics.clone(),
        options.stream_max_clients,
        options.stream_max_clients_per_identity,
    );
    api::router(reads, geofences, alerts, live, options, metrics, &access)
}

//! The API's settings: flags, environment variables and a TOML file, layered the way of every
//! program ([`settings::layer`]) and resolved into one typed [`ApiConfig`], with the Cosmos DB
//! account read as every program reads it ([`settings::CosmosAccount`]).
//!
//! Precedence: flag, then environment variable, then the file given by `--config`
//! (`FLEET_API_CONFIG`), then the default. File keys are the environment variable names in
//! lower case. The account key (`COSMOS_KEY`) comes from the environment or the file only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use axum::http::HeaderValue;
use clap::Args;
use ipnet::IpNet;
use serde::Deserialize;
use settings::{CosmosAccount, cosmos_key_from_env, secret_from_env};
use url::Url;

use crate::access::{AccessConfig, OidcSettings};
use crate::budget::RuBudget;
use crate::map::{MapSignIn, MapUpdates};
use crate::serving::Serving;
use crate::tiles::MapTiles;
use crate::tls::TlsFiles;
use crate::track::request::TrackLimits;
use cosmos::Priority;

pub use settings::{ConfigError, DurationSetting, LogFormat, Secret};

mod limits;
use limits::{count, serving, time_limit, track_limits, trusted_proxies};

/// How many ranges a cross-partition query asks at once: a number, or `serial` (one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallelism(pub usize);

impl FromStr for Parallelism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "serial" => Ok(Parallelism(1)),
            n => match n.parse::<usize>() {
                Ok(n) if (1..=256).contains(&n) => Ok(Parallelism(n)),
                _ => Err(format!("'{n}' is not a number from 1 to 256 or 'serial'")),
            },
        }
    }
}

impl<'de> Deserialize<'de> for Parallelism {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            N(u64),
            S(String),
        }
        let text = match Form::deserialize(d)? {
            Form::N(n) => n.to_string(),
            Form::S(s) => s,
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

settings::with_cosmos_account! {
    /// Every setting as given by flags, environment or file; `None` when not given. The Cosmos
    /// DB account's settings come first, declared once for every program
    /// ([`settings::with_cosmos_account!`]).
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Settings {
        /// Container of the geofences, in COSMOS_DATABASE (created at the first fence
        /// written) [default: geofences]
        #[arg(long, env = "COSMOS_GEOFENCE_CONTAINER")]
        pub cosmos_geofence_container: Option<String>,
        /// The alerter's lease container, in COSMOS_DATABASE, where it records its alerts
        /// (GET /api/alerts) [default: alert-leases]
        #[arg(long, env = "COSMOS_ALERT_CONTAINER")]
        pub cosmos_alert_container: Option<String>,
        /// Address the API and the map listen on [default: 127.0.0.1:8080]
        #[arg(long, env = "API_ADDR")]
        pub api_addr: Option<SocketAddr>,
        /// Ranges a cross-partition query asks at once: 1 to 256, or serial [default: 8]
        #[arg(long, env = "QUERY_MAX_PARALLELISM")]
        pub query_max_parallelism: Option<Parallelism>,
        /// Results per page of a query (x-ms-max-item-count) [default: 1000]
        #[arg(long, env = "QUERY_PAGE_SIZE")]
        pub query_page_size: Option<u32>,
        /// Largest radius of a near query, metres [default: 50000]
        #[arg(long, env = "NEAR_MAX_RADIUS_M")]
        pub near_max_radius_m: Option<f64>,
        /// How long a read retries Cosmos DB's 429s before it answers 503 with Retry-After
        /// [default: 2s]
        #[arg(long, env = "QUERY_THROTTLE_WAIT")]
        pub query_throttle_wait: Option<DurationSetting>,
        /// How the map follows the fleet: stream (the live stream, one change-feed reader
        /// for every viewer) or poll (GET /api/drones every MAP_REFRESH) [default: stream]
        #[arg(long, env = "MAP_UPDATES")]
        pub map_updates: Option<MapUpdates>,
        /// How often the map polls the fleet when it does not stream [default: 2s]
        #[arg(long, env = "MAP_REFRESH")]
        pub map_refresh: Option<DurationSetting>,
        /// The map's base map: an XYZ tile URL template with {z}, {x} and {y}
        /// (Azure Maps: https://atlas.microsoft.com/map/tile?api-version=2024-04-01&tilesetId=microsoft.base.road&zoom={z}&x={x}&y={y})
        /// [default: none, a plain background]
        #[arg(long, env = "MAP_TILE_URL")]
        pub map_tile_url: Option<String>,
        /// What the map shows for the base map, as its provider asks [default: the tile
        /// server's origin]
        #[arg(long, env = "MAP_TILE_ATTRIBUTION")]
        pub map_tile_attribution: Option<String>,
        /// Azure Maps key the API sends with the tile requests it makes for the page
        /// (environment or file: MAP_TILE_KEY, MAP_TILE_KEY_FILE)
        #[arg(skip)]
        pub map_tile_key: Option<Secret>,
        /// Azure Maps account's client id: the API fetches tiles for the page with Entra ID
        /// tokens of its own identity (AZURE_CREDENTIAL), instead of MAP_TILE_KEY
        #[arg(long, env = "MAP_TILE_CLIENT_ID")]
        pub map_tile_client_id: Option<String>,
        /// Log format: text or json [default: text]
        #[arg(long, env = "LOG_FORMAT")]
        pub log_format: Option<LogFormat>,
        /// File of API keys: lines of 'name role sha256hex' (fleet-api hash-key prints one)
        #[arg(long, env = "API_KEYS_FILE")]
        pub api_keys_file: Option<PathBuf>,
        /// Let requests without a credential read positions, tracks and the map
        /// [default: false]
        #[arg(long, env = "API_ALLOW_ANONYMOUS")]
        pub api_allow_anonymous: Option<bool>,
        /// OIDC issuer whose bearer tokens are accepted, as tokens name it in `iss`
        /// (Entra ID: https://login.microsoftonline.com/TENANT/v2.0)
        #[arg(long, env = "API_OIDC_ISSUER")]
        pub api_oidc_issuer: Option<String>,
        /// Audience bearer tokens must name in `aud` (the API's application id or id URI)
        #[arg(long, env = "API_OIDC_AUDIENCE")]
        pub api_oidc_audience: Option<String>,
        /// Other origins whose pages may call the API, comma-separated
        /// (https://ops.example.com,http://localhost:3000) [default: none]
        #[arg(long, env = "API_CORS_ORIGINS")]
        pub api_cors_origins: Option<String>,
        /// Certificate chain to serve HTTPS with, PEM, leaf first; read again when it
        /// changes [default: plain HTTP, for a TLS ingress in front]
        #[arg(long, env = "API_TLS_CERT_FILE")]
        pub api_tls_cert_file: Option<PathBuf>,
        /// Private key of API_TLS_CERT_FILE, PEM (PKCS#8, PKCS#1 or SEC1)
        #[arg(long, env = "API_TLS_KEY_FILE")]
        pub api_tls_key_file: Option<PathBuf>,
        /// Client id the map signs in with at API_OIDC_ISSUER (a single-page app
        /// registration; authorization code with PKCE) [default: the map does not sign in]
        #[arg(long, env = "API_MAP_CLIENT_ID")]
        pub api_map_client_id: Option<String>,
        /// Scope the map asks for [default: API_OIDC_AUDIENCE/.default]
        #[arg(long, env = "API_MAP_SCOPE")]
        pub api_map_scope: Option<String>,
        /// Priority level of the API's Cosmos DB requests: low (throttled before the
        /// writer's) or high [default: low]
        #[arg(long, env = "QUERY_PRIORITY")]
        pub query_priority: Option<Priority>,
        /// RU of Cosmos DB reads each caller may spend per second, or off [default: 1000]
        #[arg(long, env = "API_RU_PER_SEC_PER_IDENTITY")]
        pub api_ru_per_sec_per_identity: Option<RuBudget>,
        /// Fan-out queries (near, within, all) that run at once, 1 to 4096 [default: 16]
        #[arg(long, env = "API_MAX_CONCURRENT_QUERIES")]
        pub api_max_concurrent_queries: Option<usize>,
        /// Live streams (GET /api/drones/stream) open at once, 1 to 100000 [default: 1000]
        #[arg(long, env = "API_STREAM_MAX_CLIENTS")]
        pub api_stream_max_clients: Option<usize>,
        /// Fan-out queries one caller (key, token subject, anonymous client address) runs at
        /// once, 1 to 4096 [default: 4]
        #[arg(long, env = "API_MAX_CONCURRENT_QUERIES_PER_IDENTITY")]
        pub api_max_concurrent_queries_per_identity: Option<usize>,
        /// Live streams one caller has open at once, 1 to 100000 [default: 50]
        #[arg(long, env = "API_STREAM_MAX_CLIENTS_PER_IDENTITY")]
        pub api_stream_max_clients_per_identity: Option<usize>,
        /// Connections open at once; one more is closed, 1 to 1000000 [default: 1024]
        #[arg(long, env = "API_MAX_CONNECTIONS")]
        pub api_max_connections: Option<usize>,
        /// How long a client has for a request's headers (and a new or idle connection for
        /// its first bytes) [default: 10s]
        #[arg(long, env = "API_HEADER_TIMEOUT")]
        pub api_header_timeout: Option<DurationSetting>,
        /// How long a client has to send a request's body in full [default: 10s]
        #[arg(long, env = "API_BODY_TIMEOUT")]
        pub api_body_timeout: Option<DurationSetting>,
        /// How long an answer may take to begin (a live stream: its start) [default: 30s]
        #[arg(long, env = "API_REQUEST_TIMEOUT")]
        pub api_request_timeout: Option<DurationSetting>,
        /// How long a client may take no write before its connection, a live stream's
        /// included, is dropped [default: 30s]
        #[arg(long, env = "API_STREAM_STALL")]
        pub api_stream_stall: Option<DurationSetting>,
        /// Proxies whose X-Forwarded-For names the client, comma-separated addresses or CIDR
        /// ranges [default: none: the peer is the client]
        #[arg(long, env = "API_TRUSTED_PROXIES")]
        pub api_trusted_proxies: Option<String>,
        /// Positions a page of a track holds when the request names no limit, up to
        /// TRACK_MAX_PAGE_LIMIT [default: 1000]
        #[arg(long, env = "TRACK_PAGE_LIMIT")]
        pub track_page_limit: Option<usize>,
        /// Most positions a request may ask a page of a track for, 1 to 100000
        /// [default: 10000]
        #[arg(long, env = "TRACK_MAX_PAGE_LIMIT")]
        pub track_max_page_limit: Option<usize>,
        /// Longest span of a track from since to until; a longer one is refused with 400
        /// [default: 24h]
        #[arg(long, env = "TRACK_MAX_SPAN")]
        pub track_max_span: Option<DurationSetting>,
    }
}

settings::layered!(Settings with_cosmos_account {
    cosmos_geofence_container,
    cosmos_alert_container,
    api_addr,
    query_max_parallelism,
    query_page_size,
    near_max_radius_m,
    query_throttle_wait,
    map_updates,
    map_refresh,
    map_tile_url,
    map_tile_attribution,
    map_tile_key,
    map_tile_client_id,
    log_format,
    api_keys_file,
    api_allow_anonymous,
    api_oidc_issuer,
    api_oidc_audience,
    api_cors_origins,
    api_tls_cert_file,
    api_tls_key_file,
    api_map_client_id,
    api_map_scope,
    query_priority,
    api_ru_per_sec_per_identity,
    api_max_concurrent_queries,
    api_stream_max_clients,
    api_max_concurrent_queries_per_identity,
    api_stream_max_clients_per_identity,
    api_max_connections,
    api_header_timeout,
    api_body_timeout,
    api_request_timeout,
    api_stream_stall,
    api_trusted_proxies,
    track_page_limit,
    track_max_page_limit,
    track_max_span,
});

/// How the API reads and what it accepts.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiOptions {
    /// Ranges a cross-partition query asks at once (1: serially).
    pub max_parallelism: usize,
    /// Results per query page.
    pub page_size: u32,
    /// Largest radius of a near query, metres.
    pub max_radius_m: f64,
    /// How long a read retries Cosmos DB's 429s before it answers 503: a caller waits for
    /// it, and at low priority a throttled read means the budget is going to the writes.
    pub throttle_wait: Duration,
    /// How the map follows the fleet.
    pub map_updates: MapUpdates,
    /// How often the map polls, when it does.
    pub map_refresh: Duration,
    /// Other origins whose pages may call the API (CORS); none: only the API's own.
    pub cors_origins: Vec<HeaderValue>,
    /// How the map signs in; none: it asks without a credential.
    pub map_sign_in: Option<MapSignIn>,
    /// The map's base map; none: a plain background.
    pub map_tiles: Option<MapTiles>,
    /// The container of the geofences, in the positions' database.
    pub geofence_container: String,
    /// The alerter's lease container, where it records its alerts.
    pub alert_container: String,
    /// The priority level of every Cosmos DB request (priority-based execution).
    pub priority: Priority,
    /// RU each caller may spend per second.
    pub ru_per_sec_per_identity: RuBudget,
    /// Fan-out queries that run at once.
    pub max_concurrent_queries: usize,
    /// Live streams open at once.
    pub stream_max_clients: usize,
    /// Fan-out queries one caller runs at once.
    pub max_concurrent_queries_per_identity: usize,
    /// Live streams one caller has open at once.
    pub stream_max_clients_per_identity: usize,
    /// How long a client has to send a request's body.
    pub body_timeout: Duration,
    /// How long an answer may take to begin.
    pub request_timeout: Duration,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<IpNet>,
    /// What a track's pages are held to.
    pub track: TrackLimits,
}

impl Default for ApiOptions {
    /// 8 ranges at once, pages of 1,000, radii up to 50 km, the map streaming (polling every
    /// 2 s when it polls), no other origin, low priority, 1,000 RU/s per caller, 16 fan-outs
    /// at once (4 of one caller), 1,000 live streams (50 of one caller), bodies within 10 s,
    /// answers begun within 30 s, no trusted proxy, tracks as [`TrackLimits::default`].
    fn default() -> Self {
        Self {
            max_parallelism: 8,
            page_size: 1000,
            max_radius_m: 50_000.0,
            throttle_wait: Duration::from_secs(2),
            map_updates: MapUpdates::Stream,
            map_refresh: Duration::from_secs(2),
            cors_origins: Vec::new(),
            map_sign_in: None,
            map_tiles: None,
            geofence_container: "geofences".into(),
            alert_container: "alert-leases".into(),
            priority: Priority::Low,
            ru_per_sec_per_identity: RuBudget::PerSec(1000.0),
            max_concurrent_queries: 16,
            stream_max_clients: 1000,
            max_concurrent_queries_per_identity: 4,
            stream_max_clients_per_identity: 50,
            body_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            trusted_proxies: Vec::new(),
            track: TrackLimits::default(),
        }
    }
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Cosmos DB: the account key may be a read-only key, which keeps geofences read-only.
    pub cosmos: CosmosAccount,
    /// Where to listen.
    pub addr: SocketAddr,
    /// Reads and limits.
    pub options: ApiOptions,
    /// Log format.
    pub log_format: LogFormat,
    /// Who may see the fleet.
    pub access: AccessConfig,
    /// HTTPS files; none: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// What every connection is held to.
    pub serving: Serving,
}

impl Settings {
    /// The secrets that have no flag: `COSMOS_KEY`, from the environment or the file
    /// `COSMOS_KEY_FILE` names.
    pub fn secrets_from_env() -> Result<Settings, ConfigError> {
        let map_tile_key = secret_from_env("MAP_TILE_KEY")?;
        Ok(Settings {
            cosmos_key: cosmos_key_from_env()?,
            map_tile_key,
            ..Settings::default()
        })
    }

    /// Resolves into a typed configuration, applying defaults and checking values.
    pub fn resolve(mut self) -> Result<ApiConfig, ConfigError> {
        let cosmos = self.take_cosmos_account()?;
        let defaults = ApiOptions::default();
        let page_size = self.query_page_size.unwrap_or(defaults.page_size);
        if page_size == 0 {
            return Err(ConfigError::Invalid {
                name: "QUERY_PAGE_SIZE",
                message: "must be at least 1".into(),
            });
        }
        let max_radius_m = self.near_max_radius_m.unwrap_or(defaults.max_radius_m);
        if !(max_radius_m.is_finite() && max_radius_m > 0.0 && max_radius_m <= 20_000_000.0) {
            return Err(ConfigError::Invalid {
                name: "NEAR_MAX_RADIUS_M",
                message: "must be a number of metres above 0 and at most 20000000".into(),
            });
        }
        let oidc = oidc(self.api_oidc_issuer, self.api_oidc_audience)?;
        let map_sign_in = map_sign_in(oidc.as_ref(), self.api_map_client_id, self.api_map_scope)?;
        let access = access(
            self.api_keys_file.as_deref(),
            oidc,
            self.api_allow_anonymous,
        )?;
        let max_concurrent_queries = count(
            "API_MAX_CONCURRENT_QUERIES",
            self.api_max_concurrent_queries,
            defaults.max_concurrent_queries,
            4096,
        )?;
        let stream_max_clients = count(
            "API_STREAM_MAX_CLIENTS",
            self.api_stream_max_clients,
            defaults.stream_max_clients,
            100_000,
        )?;
        let serving = serving(
            self.api_header_timeout,
            self.api_stream_stall,
            self.api_max_connections,
        )?;
        let map_refresh = self.map_refresh.map_or(defaults.map_refresh, |d| d.0);
        if map_refresh < Duration::from_millis(100) {
            return Err(ConfigError::Invalid {
                name: "MAP_REFRESH",
                message: "must be at least 100ms".into(),
            });
        }
        Ok(ApiConfig {
            cosmos,
            addr: self
                .api_addr
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
            options: ApiOptions {
                max_parallelism: self
                    .query_max_parallelism
                    .map_or(defaults.max_parallelism, |p| p.0),
                page_size,
                max_radius_m,
                throttle_wait: self
                    .query_throttle_wait
                    .map_or(defaults.throttle_wait, |d| d.0),
                map_updates: self.map_updates.unwrap_or_default(),
                map_refresh,
                cors_origins: cors_origins(self.api_cors_origins.as_deref())?,
                map_sign_in,
                map_tiles: map_tiles(
                    self.map_tile_url,
                    self.map_tile_attribution,
                    self.map_tile_key,
                    self.map_tile_client_id,
                )?,
                geofence_container: self
                    .cosmos_geofence_container
                    .unwrap_or(defaults.geofence_container),
                alert_container: self
                    .cosmos_alert_container
                    .unwrap_or(defaults.alert_container),
                priority: self.query_priority.unwrap_or(defaults.priority),
                ru_per_sec_per_identity: self
                    .api_ru_per_sec_per_identity
                    .unwrap_or(defaults.ru_per_sec_per_identity),
                max_concurrent_queries,
                stream_max_clients,
                max_concurrent_queries_per_identity: count(
                    "API_MAX_CONCURRENT_QUERIES_PER_IDENTITY",
                    self.api_max_concurrent_queries_per_identity,
                    defaults.max_concurrent_queries_per_identity,
                    4096,
                )?,
                stream_max_clients_per_identity: count(
                    "API_STREAM_MAX_CLIENTS_PER_IDENTITY",
                    self.api_stream_max_clients_per_identity,
                    defaults.stream_max_clients_per_identity,
                    100_000,
                )?,
                body_timeout: time_limit(
                    "API_BODY_TIMEOUT",
                    self.api_body_timeout,
                    defaults.body_timeout,
                )?,
                request_timeout: time_limit(
                    "API_REQUEST_TIMEOUT",
                    self.api_request_timeout,
                    defaults.request_timeout,
                )?,
                trusted_proxies: trusted_proxies(self.api_trusted_proxies.as_deref())?,
                track: track_limits(
                    self.track_page_limit,
                    self.track_max_page_limit,
                    self.track_max_span,
                )?,
            },
            log_format: self.log_format.unwrap_or_default(),
            access,
            tls: tls_files(self.api_tls_cert_file, self.api_tls_key_file)?,
            serving,
        })
    }
}

/// The origins of `API_CORS_ORIGINS`, each `scheme://host[:port]` as a browser sends it in
/// `Origin`.
fn cors_origins(list: Option<&str>) -> Result<Vec<HeaderValue>, ConfigError> {
    let items = list.unwrap_or_default().split(',').map(str::trim);
    items
        .filter(|item| !item.is_empty())
        .map(|item| {
            let origin = Url::parse(item)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"))
                .map(|u| u.origin().ascii_serialization())
                .filter(|origin| origin == item.trim_end_matches('/'));
            origin
                .and_then(|o| HeaderValue::from_str(&o).ok())
                .ok_or_else(|| ConfigError::Invalid {
                    name: "API_CORS_ORIGINS",
                    message: format!(
                        "'{item}' is not an origin: scheme://host[:port] with http or https, \
                         no path (a wildcard is not accepted)"
                    ),
                })
        })
        .collect()
}

/// The map's sign-in: a client id at the API's own issuer, asking for the API's audience.
fn map_sign_in(
    oidc: Option<&OidcSettings>,
    client_id: Option<String>,
    scope: Option<String>,
) -> Result<Option<MapSignIn>, ConfigError> {
    let Some(client_id) = client_id.filter(|c| !c.trim().is_empty()) else {
        return match scope {
            Some(_) => Err(ConfigError::Missing {
                name: "API_MAP_CLIENT_ID",
                hint: "the map's client id, which API_MAP_SCOPE is asked for by",
            }),
            None => Ok(None),
        };
    };
    let Some(oidc) = oidc else {
        return Err(ConfigError::Missing {
            name: "API_OIDC_ISSUER",
            hint: "the issuer the map signs in at (API_MAP_CLIENT_ID is a client of it)",
        });
    };
    let issuer = Url::parse(&oidc.issuer).expect("checked as a URL");
    Ok(Some(MapSignIn {
        issuer: oidc.issuer.clone(),
        issuer_origin: issuer.origin().ascii_serialization(),
        client_id,
        scope: scope.unwrap_or_else(|| format!("{}/.default", oidc.audience.trim_end_matches('/'))),
    }))
}

/// The HTTPS files: both or neither.
fn tls_files(cert: Option<PathBuf>, key: Option<PathBuf>) -> Result<Option<TlsFiles>, ConfigError> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert, key })),
        (Some(_), None) => Err(ConfigError::Missing {
            name: "API_TLS_KEY_FILE",
            hint: "the private key file of API_TLS_CERT_FILE's certificate",
        }),
        (None, Some(_)) => Err(ConfigError::Missing {
            name: "API_TLS_CERT_FILE",
            hint: "the certificate file API_TLS_KEY_FILE is the key of",
        }),
    }
}

mod access;
use access::{access, oidc};
mod map_tiles;
pub use map_tiles::map_tiles;
#[cfg(test)]
mod tests;

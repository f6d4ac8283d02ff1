//! The HTTP API: routes, request checks, GeoJSON answers, the cost headers and metrics of
//! every answer; the map's routes and the browser's rules are layered in here.
//!
//! Every answer of a read carries `x-query-request-charge` (RU) and `x-query-calls` (Cosmos
//! HTTP calls, retries included), with `x-query-throttled` (calls answered 429) and
//! `x-query-parallelism` (most ranges asked at once), also when it failed; bad input is a 400 whose JSON body
//! says what is wrong, an unknown drone a 404. Request bodies are bounded. Every read is held to
//! its caller's RU budget and every fan-out to the slots ([`crate::budget`]), after its body
//! is read in full ([`crate::intake`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use chrono::{DateTime, Utc};
use cosmos::{ReadCost, ReadFailure};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::access::{Access, Role, guarded};
use crate::browser;
use crate::budget::{self, Limits};
use crate::config::ApiOptions;
use crate::geo::{self, BadInput, LonLat, MAX_BODY_BYTES, Polygon};
use crate::geofences::Geofences;
use crate::intake;
use crate::map;
use crate::metrics::Metrics;
use crate::reads::{Drone, Reads};
use crate::resource_id::{BadId, DeviceId};
use crate::track::continuation::Continuation;
use crate::track::request::track_request;
use crate::track::{TrackPage, TrackRequest};
use crate::upstream;
use geojson::feature::Id;
use geojson::{Feature, FeatureCollection, Geometry, GeometryValue, JsonObject, Position};

/// Most drones one answer lists.
pub const MAX_LIMIT: usize = 10_000;

/// What every request handler shares.
#[derive(Debug)]
struct ApiState {
    reads: Reads,
    metrics: Arc<Metrics>,
    options: ApiOptions,
}

/// Why a request got no answer.
#[derive(Debug)]
enum ApiError {
    BadRequest(String),
    /// Not found, with what finding out cost (when Cosmos DB was asked).
    NotFound(String, Option<ReadCost>),
    TooLarge,
    Cosmos(ReadFailure),
}

impl From<BadInput> for ApiError {
    fn from(e: BadInput) -> Self {
        ApiError::BadRequest(e.0)
    }
}

impl From<BadId> for ApiError {
    fn from(e: BadId) -> Self {
        ApiError::BadRequest(e.0)
    }
}

impl From<ReadFailure> for ApiError {
    fn from(e: ReadFailure) -> Self {
        ApiError::Cosmos(e)
    }
}

impl ApiError {
    fn status_and_body(&self) -> (StatusCode, Value) {
        let body = |code: &str, message: &str| json!({"error": code, "message": message});
        match self {
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, body("bad_request", m)),
            ApiError::NotFound(m, _) => (StatusCode::NOT_FOUND, body("not_found", m)),
            ApiError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                body(
                    "too_large",
                    &format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
                ),
            ),
            ApiError::Cosmos(f) if f.source.status() == Some(429) => (
                StatusCode::SERVICE_UNAVAILABLE,
                body(
                    "throttled",
                    "Cosmos DB kept throttling (429) past the read's wait; try again after Retry-After",
                ),
            ),
            ApiError::Cosmos(f) => {
                // The detail (status, message, the account's URL) is the operator's, not the caller's.
                tracing::warn!(error = %f.source, "read failed");
                (StatusCode::BAD_GATEWAY, body("cosmos", upstream::FAILED))
            }
        }
    }

    fn cost(&self) -> Option<ReadCost> {
        match self {
            ApiError::Cosmos(f) => Some(f.cost),
            ApiError::NotFound(_, cost) => *cost,
            _ => None,
        }
    }
}

/// The answer of a read: a JSON body and what it cost.
type Answered = Result<(Value, ReadCost), ApiError>;

/// The API's router, reading through `reads`, recording into `metrics`, letting callers in
/// by `access`. Each route declares the role it needs where it is routed; `/healthz` and
/// `/metrics` are open, as they carry no positions (counts, RU and latencies only).
pub fn router(
    reads: Reads,
    geofences: Geofences,
    alerts: crate::alerts::Alerts,
    live: crate::stream::Live,
    options: ApiOptions,
    metrics: Arc<Metrics>,
    access: &Access,
) -> Router {
    let limits = Arc::new(Limits::new(
        options.ru_per_sec_per_identity,
        options.max_concurrent_queries,
        options.max_concurrent_queries_per_identity,
        metrics.clone(),
    ));
    let read = |route: MethodRouter<Arc<ApiState>>| guarded(access, Role::Read, route);
    // Inside the guard (which names the caller): the caller's budget, then for a fan-out its
    // slot, then the read.
    let budgeted = |route: MethodRouter<Arc<ApiState>>| {
        read(route.route_layer(axum::middleware::from_fn_with_state(
            limits.clone(),
            budget::budget,
        )))
    };
    let fan_out = |route: MethodRouter<Arc<ApiState>>| {
        budgeted(route.route_layer(axum::middleware::from_fn_with_state(
            limits.clone(),
            budget::fan_out_slot,
        )))
    };
    let cors = browser::cors(&options.cors_origins);
    let map = map::routes(
        options.map_updates,
        options.map_refresh,
        options.map_sign_in.as_ref(),
        options.map_tiles.as_ref(),
    );
    let tiles = crate::tiles::routes(options.map_tiles.as_ref(), access, metrics.clone());
    let audit = axum::middleware::from_fn_with_state(metrics.clone(), crate::audit::audit);
    let whole_body = axum::middleware::from_fn_with_state(options.body_timeout, intake::whole_body);
    let client_address = axum::middleware::from_fn_with_state(
        options.trusted_proxies.clone().into(),
        intake::client_address,
    );
    let answer_within =
        axum::middleware::from_fn_with_state(options.request_timeout, intake::answer_within);
    let shared = Arc::new(ApiState {
        reads,
        metrics,
        options,
    });
    let router = Router::new()
        .merge(map)
        .merge(tiles)
        .merge(geofences.routes(access, limits.clone()))
        .merge(alerts.routes(access, limits.clone()))
        .merge(live.routes(access, limits.clone()))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics_text))
        .route("/api/drones", fan_out(get(all)))
        .route("/api/drones/near", fan_out(get(near)))
        .route(
            "/api/drones/within",
            fan_out(get(within_bbox).post(within_polygon)),
        )
        .route("/api/drones/:id", budgeted(get(one)))
        .route("/api/drones/:id/track", budgeted(get(track)))
        .fallback(|| async {
            error_response(ApiError::NotFound(
                "no such route; see GET /api/drones/near, /api/drones/within, /api/drones/{id}, /api/drones/{id}/track".into(),
                None,
            ))
        })
        // Bodies are read with their own bound (answered as JSON); this layer's is lifted.
        .layer(DefaultBodyLimit::disable());
    let router = match cors {
        Some(cors) => router.layer(cors),
        None => router,
    };
    // The audit outermost: it sees every answer, refusals and CORS preflights included.
    // Inside it, the answer's time bound, the client's address, then the whole body.
    router
        .layer(whole_body)
        .layer(client_address)
        .layer(answer_within)
        .layer(axum::middleware::from_fn(browser::security_headers))
        .layer(audit)
        .with_state(shared)
}

/// Serves `router` on `listener` with the default connection limits until `shutdown` is
/// cancelled ([`crate::serving::serve`] takes others, and TLS).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    crate::serving::serve(listener, router, Default::default(), None, shutdown).await
}

async fn metrics_text(State(s): State<Arc<ApiState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

fn error_response(error: ApiError) -> Response {
    let (status, body) = error.status_and_body();
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // Throttled past the read's wait: the partition's budget went to the writes.
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// Runs a route's work and turns its answer into a response with the cost headers, and
/// records it with the time it took.
async fn answer(
    s: &ApiState,
    route: &'static str,
    work: impl std::future::Future<Output = Answered>,
) -> Response {
    let started = Instant::now();
    let answered = work.await;
    let (mut response, cost) = match answered {
        Ok((body, cost)) => {
            let mut r = axum::Json(body).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/geo+json"),
            );
            (r, Some(cost))
        }
        Err(e) => {
            let cost = e.cost();
            (error_response(e), cost)
        }
    };
    if let Some(cost) = &cost {
        let headers = response.headers_mut();
        let number = |v: String| HeaderValue::from_str(&v).expect("a number is a header value");
        headers.insert(
            "x-query-request-charge",
            number(format!("{:.2}", cost.request_charge)),
        );
        headers.insert("x-query-calls", number(cost.calls.to_string()));
        headers.insert("x-query-throttled", number(cost.throttled.to_string()));
        headers.insert(
            "x-query-parallelism",
            number(cost.peak_parallelism.to_string()),
        );
    }
    s.metrics.record(
        route,
        response.status().as_u16(),
        cost.as_ref(),
        started.elapsed().as_secs_f64(),
    );
    if let Some(cost) = cost {
        // For the caller's RU budget (crate::budget).
        response.extensions_mut().insert(cost);
    }
    response
}

/// The query string's parameters; names outside `accepted` are refused.
fn params(raw: Option<String>, accepted: &[&str]) -> Result<HashMap<String, String>, ApiError> {
    let raw = raw.unwrap_or_default();
    let mut map = HashMap::new();
    for (name, value) in url::form_urlencoded::parse(raw.as_bytes()) {
        if !accepted.contains(&name.as_ref()) {
            return Err(ApiError::BadRequest(format!(
                "unknown parameter '{name}'; this route takes {}",
                accepted.join(", ")
            )));
        }
        map.insert(name.into_owned(), value.into_owned());
    }
    Ok(map)
}

fn required<'a>(params: &'a HashMap<String, String>, name: &str) -> Result<&'a str, ApiError> {
    params
        .get(name)
        .map(String::as_str)
        .ok_or_else(|| ApiError::BadRequest(format!("parameter '{name}' is missing")))
}

fn limit(params: &HashMap<String, String>) -> Result<usize, ApiError> {
    match params.get("limit") {
        None => Ok(MAX_LIMIT),
        Some(text) => text
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "limit: '{text}' is not a whole number from 1 to {MAX_LIMIT}"
                ))
            }),
    }
}

/// The drones as a FeatureCollection, with OGC API Features' `numberMatched` and
/// `numberReturned`.
fn collection(drones: &[Drone], limit: usize) -> Value {
    let now = Utc::now();
    let features: Vec<Feature> = drones
        .iter()
        .take(limit)
        .map(|d| d.to_feature(now))
        .collect();
    let mut counts = JsonObject::new();
    counts.insert("numberMatched".into(), json!(drones.len()));
    counts.insert("numberReturned".into(), json!(features.len()));
    geojson_value(&FeatureCollection {
        bbox: None,
        features,
        foreign_members: Some(counts),
    })
}

/// A GeoJSON object as the JSON the API answers with.
fn geojson_value(object: &impl serde::Serialize) -> Value {
    serde_json::to_value(object).expect("GeoJSON objects serialise")
}

async fn all(State(s): State<Arc<ApiState>>, RawQuery(raw): RawQuery) -> Response {
    answer(&s, "all", async {
        let p = params(raw, &["limit"])?;
        let limit = limit(&p)?;
        let answer = s.reads.all().await?;
        Ok((collection(&answer.value, limit), answer.cost))
    })
    .await
}

async fn near(State(s): State<Arc<ApiState>>, RawQuery(raw): RawQuery) -> Response {
    answer(&s, "near", async {
        let p = params(raw, &["lat", "lon", "radius_m", "limit"])?;
        let lat = geo::number("lat", required(&p, "lat")?)?;
        let lon = geo::number("lon", required(&p, "lon")?)?;
        let at = LonLat::new(lon, lat, "point")?;
        let radius = geo::radius(required(&p, "radius_m")?, s.options.max_radius_m)?;
        let limit = limit(&p)?;
        let answer = s.reads.near(at, radius).await?;
        Ok((collection(&answer.value, limit), answer.cost))
    })
    .await
}

async fn within_bbox(State(s): State<Arc<ApiState>>, RawQuery(raw): RawQuery) -> Response {
    answer(&s, "within", async {
        let p = params(raw, &["bbox", "limit"])?;
        let area = Polygon::from_bbox(required(&p, "bbox")?)?;
        let limit = limit(&p)?;
        let answer = s.reads.within(&area).await?;
        Ok((collection(&answer.value, limit), answer.cost))
    })
    .await
}

async fn within_polygon(
    State(s): State<Arc<ApiState>>,
    RawQuery(raw): RawQuery,
    body: Body,
) -> Response {
    answer(&s, "within", async {
        let p = params(raw, &["limit"])?;
        let limit = limit(&p)?;
        let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .map_err(|_| ApiError::TooLarge)?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::BadRequest(format!(
                "polygon: the body is not JSON ({e}); send a GeoJSON Polygon"
            ))
        })?;
        let area = Polygon::from_geojson(&value)?;
        let answer = s.reads.within(&area).await?;
        Ok((collection(&answer.value, limit), answer.cost))
    })
    .await
}

async fn one(
    State(s): State<Arc<ApiState>>,
    id: Result<DeviceId, BadId>,
    RawQuery(raw): RawQuery,
) -> Response {
    answer(&s, "by_id", async {
        params(raw, &[])?;
        let id = id?;
        let id = id.as_str();
        let answer = s.reads.one(id).await?;
        match answer.value {
            Some(drone) => Ok((geojson_value(&drone.to_feature(Utc::now())), answer.cost)),
            None => Err(ApiError::NotFound(
                format!("no drone with id '{id}'"),
                Some(answer.cost),
            )),
        }
    })
    .await
}

/// Unix milliseconds as RFC 3339, as the documents write device time.
fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A page of a drone's track as one Feature: no geometry, a Point, or a LineString; with the
/// continuation of the next page, if any.
fn track_feature(request: &TrackRequest, page: &TrackPage) -> Value {
    let positions: Vec<Position> = page
        .points
        .iter()
        .map(|p| Position::from(vec![p.lon, p.lat]))
        .collect();
    let geometry = match positions.len() {
        0 => None,
        1 => Some(GeometryValue::new_point(positions[0].clone())),
        _ => Some(GeometryValue::new_line_string(positions)),
    };
    let continuation = page.next.map(|after| {
        Continuation {
            span: request.span,
            after,
        }
        .encode(&request.device_id)
    });
    let properties = json!({
        "deviceId": request.device_id,
        "since": rfc3339(request.span.since_ms),
        "until": rfc3339(request.span.until_ms),
        "limit": request.limit,
        "points": page.points.len(),
        "seq": page.points.iter().map(|p| p.seq).collect::<Vec<_>>(),
        "deviceTimes": page.points.iter().map(|p| rfc3339(p.device_time_ms)).collect::<Vec<_>>(),
        "continuation": continuation,
    });
    geojson_value(&Feature {
        bbox: None,
        geometry: geometry.map(Geometry::new),
        id: Some(Id::String(request.device_id.clone())),
        properties: properties.as_object().cloned(),
        foreign_members: None,
    })
}

async fn track(
    State(s): State<Arc<ApiState>>,
    id: Result<DeviceId, BadId>,
    RawQuery(raw): RawQuery,
) -> Response {
    answer(&s, "track", async {
        let p = params(raw, &["since", "until", "limit", "continuation"])?;
        let id = id?;
        let request = track_request(id.as_str(), &p, Utc::now(), &s.options.track)
            .map_err(ApiError::BadRequest)?;
        let answer = s.reads.track(&request).await?;
        Ok((track_feature(&request, &answer.value), answer.cost))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_checked_by_name() {
        let p = params(Some("lat=1&lon=2".into()), &["lat", "lon"]).unwrap();
        assert_eq!(required(&p, "lat").unwrap(), "1");
        assert!(
            matches!(required(&p, "radius_m"), Err(ApiError::BadRequest(m)) if m.contains("radius_m"))
        );
        let err = params(Some("radius=3".into()), &["radius_m"]).unwrap_err();
        assert!(matches!(err, ApiError::BadRequest(m) if m.contains("unknown parameter 'radius'")));
        let p = params(Some("limit=0".into()), &["limit"]).unwrap();
        assert!(limit(&p).is_err());
        let p = params(Some("limit=5".into()), &["limit"]).unwrap();
        assert_eq!(limit(&p).unwrap(), 5);
    }

    #[test]
    fn a_track_of_one_point_is_a_point_and_of_none_is_null() {
        let request = TrackRequest {
            device_id: "d".into(),
            span: crate::track::Span {
                since_ms: 0,
                until_ms: 10,
            },
            after: None,
            limit: 2,
        };
        let page = |n: u64, next: bool| TrackPage {
            points: (1..=n)
                .map(|seq| crate::track::TrackPoint {
                    seq,
                    device_time_ms: seq as i64,
                    lon: 1.0,
                    lat: 2.0,
                })
                .collect(),
            next: next.then_some(telemetry::PositionOrder {
                device_time_ms: n as i64,
                seq: n,
            }),
        };
        let none = track_feature(&request, &page(0, false));
        assert_eq!(none["geometry"], Value::Null);
        assert_eq!(none["properties"]["continuation"], Value::Null);
        assert_eq!(
            track_feature(&request, &page(1, false))["geometry"]["type"],
            "Point"
        );
        let line = track_feature(&request, &page(2, true));
        assert_eq!(line["geometry"]["type"], "LineString");
        assert_eq!(line["properties"]["seq"], json!([1, 2]));
        assert_eq!(
            line["properties"]["deviceTimes"][0],
            "1970-01-01T00:00:00.001Z"
        );
        let token = line["properties"]["continuation"].as_str().unwrap();
        let next = Continuation::decode("d", token).unwrap();
        assert_eq!((next.span, next.after.seq), (request.span, 2));
    }
}

//! Geofences: areas an operator names, a polygon or a circle (its centre and radius), kept in
//! a Cosmos DB container of their own in the positions' database, one document per fence
//! (partition key `/id`); read with `Fleet.Read`, changed only with `Fleet.Admin`, each
//! request held to its caller's RU budget ([`crate::budget`]).
//!
//! A fence is sent and answered as a GeoJSON Feature: a Polygon geometry (or a bare Polygon),
//! or a circle as Azure Maps writes one, a Point geometry with the properties
//! `{"subType": "Circle", "radius": metres}`. The container is created at the first fence
//! written (`PUT` needs a key or role that may write; a read-only key leaves the fences
//! readable and answers `PUT` with Cosmos DB's refusal).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use chrono::Utc;
use cosmos::{
    ContainerClient, ContainerSetup, CosmosError, QueryOptions, QueryRequest, QueryScope, ReadCost,
};
use serde_json::{Value, json};

use crate::access::{Access, Role, guarded};
use crate::budget::{self, Limits};
use crate::geo::{BadInput, LonLat, MAX_BODY_BYTES, Polygon};
use crate::resource_id::FenceId;
use crate::upstream;

/// Where the fences live, and the largest circle accepted.
#[derive(Debug, Clone)]
pub struct Geofences {
    container: ContainerClient,
    max_radius_m: f64,
}

/// A fence's area.
#[derive(Debug, Clone, PartialEq)]
enum Shape {
    Polygon(Polygon),
    Circle { centre: LonLat, radius_m: f64 },
}

impl Shape {
    /// Whether `p` is inside the area.
    fn contains(&self, p: LonLat) -> bool {
        match self {
            Shape::Polygon(polygon) => polygon.contains(p),
            Shape::Circle { centre, radius_m } => centre.distance_m(p) <= *radius_m,
        }
    }

    /// The distance from `p` to the area's border, metres.
    fn border_distance_m(&self, p: LonLat) -> f64 {
        match self {
            Shape::Polygon(polygon) => polygon.border_distance_m(p),
            Shape::Circle { centre, radius_m } => (centre.distance_m(p) - radius_m).abs(),
        }
    }

    /// The area a request body names.
    fn from_geojson(value: &Value, max_radius_m: f64) -> Result<Shape, BadInput> {
        let is_circle = value["type"] == "Feature" && value["properties"]["subType"] == "Circle";
        if !is_circle {
            return Polygon::from_geojson(value).map(Shape::Polygon);
        }
        let coordinates = value["geometry"]["coordinates"].as_array();
        let (lon, lat) = match (
            value["geometry"]["type"].as_str(),
            coordinates.map(Vec::as_slice),
        ) {
            (Some("Point"), Some([lon, lat, ..])) => (lon.as_f64(), lat.as_f64()),
            _ => (None, None),
        };
        let (Some(lon), Some(lat)) = (lon, lat) else {
            return Err(BadInput(
                "circle: the geometry must be a Point [lon, lat] (Azure Maps' circle: a Point Feature with subType Circle and radius)".into(),
            ));
        };
        let centre = LonLat::new(lon, lat, "circle centre")?;
        let radius_m = value["properties"]["radius"].as_f64().unwrap_or(f64::NAN);
        if !(radius_m > 0.0 && radius_m <= max_radius_m) {
            return Err(BadInput(format!(
                "circle: radius must be metres above 0 and at most {max_radius_m}"
            )));
        }
        Ok(Shape::Circle { centre, radius_m })
    }

    /// The Feature's geometry and properties.
    fn to_geojson(&self) -> (Value, Value) {
        match self {
            Shape::Polygon(p) => (p.to_geojson(), json!({})),
            Shape::Circle { centre, radius_m } => (
                centre.to_geojson(),
                json!({"subType": "Circle", "radius": radius_m}),
            ),
        }
    }
}

/// Why a fence request got no answer.
enum FenceError {
    BadRequest(String),
    NotFound(String),
    TooLarge,
    Cosmos(CosmosError),
}

impl From<BadInput> for FenceError {
    fn from(e: BadInput) -> Self {
        FenceError::BadRequest(e.0)
    }
}

impl From<CosmosError> for FenceError {
    fn from(e: CosmosError) -> Self {
        FenceError::Cosmos(e)
    }
}

impl IntoResponse for FenceError {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            FenceError::BadRequest(m) => (StatusCode::BAD_REQUEST, "bad_request", m),
            FenceError::NotFound(id) => (
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no geofence {id:?}"),
            ),
            FenceError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
            ),
            FenceError::Cosmos(e) if e.status() == Some(429) => {
                // Throttled past the wait: the partition's budget went to the writes.
                let mut response = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(json!({"error": "throttled", "message": "Cosmos DB kept throttling (429) past the request's wait; try again after Retry-After"})),
                )
                    .into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return response;
            }
            FenceError::Cosmos(e) => {
                tracing::warn!(error = %e, "a geofence request to Cosmos DB failed");
                let message = match e.status() {
                    Some(401 | 403) => "Cosmos DB refused the request: the API's credential may not write here. A read-only key, or the role \"Cosmos DB Built-in Data Reader\", keeps geofences read-only; with COSMOS_AUTH=entra, geofences need the role \"Cosmos DB Built-in Data Contributor\" and the container COSMOS_GEOFENCE_CONTAINER created beforehand (partition key /id)".to_string(),
                    _ => upstream::FAILED.to_string(),
                };
                (StatusCode::BAD_GATEWAY, "cosmos", message)
            }
        };
        (
            status,
            axum::Json(json!({"error": code, "message": message})),
        )
            .into_response()
    }
}

/// Where a position is against one fence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement<'a> {
    /// The fence's id.
    pub fence: &'a str,
    /// Whether the position is inside the area.
    pub inside: bool,
    /// The distance from the position to the area's border, metres.
    pub border_m: f64,
}

/// The fences, as crossings are judged by (the live stream, the alerter).
#[derive(Debug, Clone, Default)]
pub struct FenceSet(Vec<(String, Shape)>);

impl FenceSet {
    /// Where `p` is against every fence, in id order.
    pub fn place(&self, p: LonLat) -> impl Iterator<Item = Placement<'_>> {
        self.0.iter().map(move |(id, shape)| Placement {
            fence: id,
            inside: shape.contains(p),
            border_m: shape.border_distance_m(p),
        })
    }

    /// The fences of `(id, GeoJSON)` pairs as the API takes them, in id order (one that
    /// does not parse is left out).
    pub fn from_features(features: &[(String, Value)]) -> FenceSet {
        let mut fences: Vec<(String, Shape)> = features
            .iter()
            .filter_map(|(id, value)| {
                Some((id.clone(), Shape::from_geojson(value, f64::INFINITY).ok()?))
            })
            .collect();
        fences.sort_by(|a, b| a.0.cmp(&b.0));
        FenceSet(fences)
    }

    /// The ids of the fences `p` is inside, in id order.
    pub(crate) fn inside(&self, p: LonLat) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, shape)| shape.contains(p))
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// The stored document as the Feature the API answers.
fn feature(doc: &Value) -> Value {
    let mut properties = doc["properties"].clone();
    if let Some(at) = doc.get("updatedAt") {
        properties["updatedAt"] = at.clone();
    }
    json!({"type": "Feature", "id": doc["id"], "geometry": doc["geometry"], "properties": properties})
}

/// `response` with what its read cost, for the caller's RU budget ([`crate::budget`]).
fn costed(mut response: Response, charge: f64) -> Response {
    response.extensions_mut().insert(ReadCost {
        request_charge: charge,
        calls: 1,
        ..ReadCost::default()
    });
    response
}

impl Geofences {
    /// The fences in `container`; circles up to `max_radius_m`.
    pub fn new(container: ContainerClient, max_radius_m: f64) -> Self {
        Self {
            container,
            max_radius_m,
        }
    }

    async fn put(&self, id: FenceId, body: Body) -> Result<Response, FenceError> {
        let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .map_err(|_| FenceError::TooLarge)?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            FenceError::BadRequest(format!(
                "geofence: the body is not JSON ({e}); send a GeoJSON Polygon or a circle"
            ))
        })?;
        let shape = Shape::from_geojson(&value, self.max_radius_m)?;
        let (geometry, properties) = shape.to_geojson();
        let doc = json!({
            "id": id.as_str(), "kind": "geofence", "geometry": geometry, "properties": properties,
            "updatedAt": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        });
        let text = serde_json::to_vec(&doc).expect("a JSON value serializes");
        let id = id.as_str();
        let written = match self.container.upsert(id, &text).await {
            Err(e) if e.is_not_found() => {
                self.container
                    .create_if_missing(&ContainerSetup::new("/id"))
                    .await?;
                self.container.upsert(id, &text).await?
            }
            other => other?,
        };
        let status = StatusCode::from_u16(written.status).unwrap_or(StatusCode::OK);
        Ok((status, axum::Json(feature(&doc))).into_response())
    }

    async fn get(&self, id: FenceId) -> Result<Response, FenceError> {
        let id = id.as_str();
        let read = self.container.read(id, id).await?;
        let (doc, charge): (Value, f64) = match read {
            Some(read) => (read.json()?, read.request_charge),
            None => return Err(FenceError::NotFound(id.to_string())),
        };
        Ok(costed(axum::Json(feature(&doc)).into_response(), charge))
    }

    /// Every fence, to judge crossings by (a fence that no longer parses is left out).
    pub async fn load(&self) -> Result<FenceSet, CosmosError> {
        let (documents, _) = self.documents().await?;
        let features: Vec<(String, Value)> = documents
            .iter()
            .filter_map(|doc| Some((doc["id"].as_str()?.to_string(), feature(doc))))
            .collect();
        Ok(FenceSet::from_features(&features))
    }

    /// Every fence document, and what reading them cost (RU); none when the container does
    /// not exist yet.
    async fn documents(&self) -> Result<(Vec<Value>, f64), CosmosError> {
        let query = QueryRequest {
            query: "SELECT * FROM c WHERE c.kind = 'geofence'".into(),
            parameters: Vec::new(),
        };
        let answer = self
            .container
            .query_counted(&query, &QueryScope::AllRanges, &QueryOptions::default())
            .await;
        match answer {
            Ok(answer) => Ok((answer.documents, answer.cost.request_charge)),
            // No fence written yet: no container yet.
            Err(f) if f.source.is_not_found() => Ok((Vec::new(), f.cost.request_charge)),
            Err(f) => Err(f.source),
        }
    }

    async fn list(&self) -> Result<Response, FenceError> {
        let (mut documents, charge) = self.documents().await?;
        documents.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
        let features: Vec<Value> = documents.iter().map(feature).collect();
        let answer = axum::Json(json!({"type": "FeatureCollection", "features": features}));
        Ok(costed(answer.into_response(), charge))
    }

    async fn delete(&self, id: FenceId) -> Result<Response, FenceError> {
        let id = id.as_str();
        match self.container.delete(id, id, None).await {
            Ok(_) => Ok(StatusCode::NO_CONTENT.into_response()),
            Err(e) if e.is_not_found() => Err(FenceError::NotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// The routes: `GET /api/geofences` and `GET /api/geofences/{id}` for `Fleet.Read`,
    /// `PUT` and `DELETE /api/geofences/{id}` for `Fleet.Admin`.
    pub fn routes<S>(self, access: &Access, limits: Arc<Limits>) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        // Inside the guard, which names the caller: the caller's RU budget.
        let role = |role: Role, route: MethodRouter<Geofences>| {
            let budgeted = route.route_layer(axum::middleware::from_fn_with_state(
                limits.clone(),
                budget::budget,
            ));
            guarded(access, role, budgeted)
        };
        let answered =
            |r: Result<Response, FenceError>| r.unwrap_or_else(IntoResponse::into_response);
        let one =
            role(
                Role::Read,
                get(move |State(g): State<Geofences>, id: FenceId| async move {
                    answered(g.get(id).await)
                }),
            )
            .merge(role(
                Role::Admin,
                axum::routing::put(
                    move |State(g): State<Geofences>, id: FenceId, body: Body| async move {
                        answered(g.put(id, body).await)
                    },
                )
                .delete(
                    move |State(g): State<Geofences>, id: FenceId| async move {
                        answered(g.delete(id).await)
                    },
                ),
            ));
        let all = role(
            Role::Read,
            get(move |State(g): State<Geofences>| async move { answered(g.list().await) }),
        );
        Router::new()
            .route("/api/geofences", all)
            .route("/api/geofences/:id", one)
            .with_state(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polygons_and_azure_maps_circles_are_fences() {
        let square = json!({"type": "Polygon", "coordinates": [[[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]]});
        assert!(matches!(
            Shape::from_geojson(&square, 1e4),
            Ok(Shape::Polygon(_))
        ));
        let circle = json!({
            "type": "Feature",
            "geometry": {"type": "Point", "coordinates": [-122.12, 47.66]},
            "properties": {"subType": "Circle", "radius": 500}
        });
        let shape = Shape::from_geojson(&circle, 1e4).unwrap();
        let (geometry, properties) = shape.to_geojson();
        assert_eq!(geometry["coordinates"], json!([-122.12, 47.66]));
        assert_eq!(properties, json!({"subType": "Circle", "radius": 500.0}));
        for bad in [
            json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [0, 0]}, "properties": {"subType": "Circle", "radius": 0}}),
            json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [0, 0]}, "properties": {"subType": "Circle", "radius": 2e4}}),
            json!({"type": "Feature", "geometry": {"type": "Point", "coordinates": [0, 95]}, "properties": {"subType": "Circle", "radius": 10}}),
            json!({"type": "Feature", "geometry": {"type": "Polygon", "coordinates": []}, "properties": {"subType": "Circle", "radius": 10}}),
            json!({"type": "Point", "coordinates": [0, 0]}),
        ] {
            assert!(Shape::from_geojson(&bad, 1e4).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_write_throttled_past_its_wait_is_busy_not_broken() {
        let refused = |status| {
            FenceError::Cosmos(CosmosError::Service(cosmos::ServiceError {
                status,
                substatus: 0,
                activity_id: None,
                request_charge: 0.0,
                retry_after: Some(std::time::Duration::from_millis(200)),
                message: String::new(),
            }))
            .into_response()
        };
        let throttled = refused(429);
        assert_eq!(throttled.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(throttled.headers()[header::RETRY_AFTER], "1");
        let forbidden = refused(403);
        assert_eq!(forbidden.status(), StatusCode::BAD_GATEWAY);
        assert!(forbidden.headers().get(header::RETRY_AFTER).is_none());
    }
}

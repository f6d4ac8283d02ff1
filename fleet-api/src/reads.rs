//! The questions the API asks Cosmos DB, and the drones and track points they answer with.
//!
//! The writer keeps one "latest" document per drone (`id` = the document id of the device,
//! partition key = the device id) and, in history mode, the drone's positions in its own
//! logical partition: track segments, or one "history" document per position in containers
//! written before segments (see `telemetry::document`). So:
//! - near / within / all: a cross-partition query over the latest documents, fanned out over
//!   the ranges (`ST_DISTANCE` / `ST_WITHIN` on `location`);
//! - one drone: a point read (one call);
//! - a latest document without `location` (the writer stored its agent's connection state
//!   before its first position) is no drone on the map: the queries over drones ask for
//!   `IS_DEFINED(c.location)`, and the point read answers as for no document;
//! - a track: a page at a time from the drone's logical partition, from history documents
//!   and track segments ([`crate::track`]).

use chrono::{DateTime, Utc};
use cosmos::{
    ContainerClient, QueryOptions, QueryParameter, QueryRequest, QueryScope, ReadCost, ReadFailure,
};
use geojson::feature::Id;
use geojson::{Feature, Geometry, JsonObject};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::geo::{LonLat, Polygon};
use crate::track::{self, TrackPage, TrackRequest};

/// The fields of a latest document the API shows.
const DRONE_FIELDS: &str = "c.deviceId, c.seq, c.deviceTime, c.deviceTimeMs, c.location, \
                            c.altM, c.headingDeg, c.speedMps, c.batteryPct, c.gnss, \
                            c.agentConnected, c.agentConnectedAt, c.agentDisconnectedAt, \
                            c.agentVersion";

/// What the writer stored of a drone's agent from IoT Hub's connection state and twin change
/// events (`telemetry::document::AGENT_FIELDS`); every field absent until an event told it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    /// Connected to the hub, as of its latest connection state event.
    #[serde(
        rename(deserialize = "agentConnected"),
        skip_serializing_if = "Option::is_none"
    )]
    pub connected: Option<bool>,
    /// When it last connected, RFC 3339.
    #[serde(
        rename(deserialize = "agentConnectedAt"),
        skip_serializing_if = "Option::is_none"
    )]
    pub connected_at: Option<String>,
    /// When it last disconnected, RFC 3339.
    #[serde(
        rename(deserialize = "agentDisconnectedAt"),
        skip_serializing_if = "Option::is_none"
    )]
    pub disconnected_at: Option<String>,
    /// The version it reports in its twin.
    #[serde(
        rename(deserialize = "agentVersion"),
        skip_serializing_if = "Option::is_none"
    )]
    pub version: Option<String>,
}

impl Agent {
    /// Whether any event told something.
    fn is_known(&self) -> bool {
        *self != Agent::default()
    }
}

/// A drone's newest position as stored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drone {
    /// The device id.
    pub device_id: String,
    /// The position's sequence number.
    pub seq: u64,
    /// Device time, RFC 3339.
    pub device_time: String,
    /// Device time, Unix milliseconds.
    pub device_time_ms: i64,
    /// The GeoJSON Point.
    pub location: Geometry,
    /// Altitude, metres.
    pub alt_m: Option<f64>,
    /// Heading, degrees.
    pub heading_deg: Option<f64>,
    /// Ground speed, m/s.
    pub speed_mps: Option<f64>,
    /// Battery, percent.
    pub battery_pct: Option<f64>,
    /// The GNSS health (`fix`, `sats`, `satsVisible`, `hAccM`), when the drone sent any.
    pub gnss: Option<Value>,
    /// Its agent's connection state and version.
    #[serde(flatten)]
    pub agent: Agent,
    /// Distance from the query's point, metres (near queries only).
    pub distance_m: Option<f64>,
}

impl Drone {
    /// Where it is, when its location is a Point.
    pub fn lon_lat(&self) -> Option<LonLat> {
        match &self.location.value {
            geojson::GeometryValue::Point { coordinates } if coordinates.len() >= 2 => {
                Some(LonLat {
                    lon: coordinates[0],
                    lat: coordinates[1],
                })
            }
            _ => None,
        }
    }

    /// The drone as a GeoJSON Feature; `now` gives its age.
    pub fn to_feature(&self, now: DateTime<Utc>) -> Feature {
        let age_s = (now.timestamp_millis() - self.device_time_ms) as f64 / 1000.0;
        let mut properties = JsonObject::new();
        properties.insert("deviceId".into(), json!(self.device_id));
        properties.insert("seq".into(), json!(self.seq));
        properties.insert("deviceTime".into(), json!(self.device_time));
        properties.insert("ageS".into(), json!(age_s));
        let optional = [
            ("distanceM", self.distance_m),
            ("altM", self.alt_m),
            ("headingDeg", self.heading_deg),
            ("speedMps", self.speed_mps),
            ("batteryPct", self.battery_pct),
        ];
        for (name, value) in optional {
            if let Some(v) = value {
                properties.insert(name.into(), json!(v));
            }
        }
        if let Some(gnss) = &self.gnss {
            properties.insert("gnss".into(), gnss.clone());
        }
        if self.agent.is_known() {
            properties.insert("agent".into(), json!(self.agent));
        }
        Feature {
            bbox: None,
            geometry: Some(self.location.clone()),
            id: Some(Id::String(self.device_id.clone())),
            properties: Some(properties),
            foreign_members: None,
        }
    }
}

/// An answer and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<T> {
    /// The answer.
    pub value: T,
    /// RU, calls and 429s.
    pub cost: ReadCost,
}

/// The reads of the API on one container.
#[derive(Debug, Clone)]
pub struct Reads {
    container: ContainerClient,
    options: QueryOptions,
}

fn param(name: &str, value: Value) -> QueryParameter {
    QueryParameter {
        name: name.to_string(),
        value,
    }
}

/// Decodes documents, leaving out (and logging) those that are not drones.
fn decode_all<T: serde::de::DeserializeOwned>(documents: Vec<Value>) -> Vec<T> {
    documents
        .into_iter()
        .filter_map(|d| match serde_json::from_value(d) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(error = %e, "a document lacks the fields of a position: left out");
                None
            }
        })
        .collect()
}

impl Reads {
    /// Reads from `container`, fanning queries out as `options` say.
    pub fn new(container: ContainerClient, options: QueryOptions) -> Self {
        Self { container, options }
    }

    async fn fan_out(&self, query: QueryRequest) -> Result<Answer<Vec<Drone>>, ReadFailure> {
        let answer = self
            .container
            .query_counted(&query, &QueryScope::AllRanges, &self.options)
            .await?;
        Ok(Answer {
            value: decode_all(answer.documents),
            cost: answer.cost,
        })
    }

    /// The drones within `radius_m` of `at`, nearest first (ties by id).
    pub async fn near(&self, at: LonLat, radius_m: f64) -> Result<Answer<Vec<Drone>>, ReadFailure> {
        let query = QueryRequest {
            query: format!(
                "SELECT {DRONE_FIELDS}, ST_DISTANCE(c.location, @here) AS distanceM FROM c \
                 WHERE c.kind = @kind AND IS_DEFINED(c.location) AND ST_DISTANCE(c.location, @here) <= @radius"
            ),
            parameters: vec![
                param("@here", at.to_geojson()),
                param("@kind", json!("latest")),
                param("@radius", json!(radius_m)),
            ],
        };
        let mut answer = self.fan_out(query).await?;
        answer.value.sort_by(|a, b| {
            let d = |x: &Drone| x.distance_m.unwrap_or(f64::INFINITY);
            d(a).total_cmp(&d(b))
                .then_with(|| a.device_id.cmp(&b.device_id))
        });
        Ok(answer)
    }

    /// The drones inside `area`, by id.
    pub async fn within(&self, area: &Polygon) -> Result<Answer<Vec<Drone>>, ReadFailure> {
        let query = QueryRequest {
            query: format!(
                "SELECT {DRONE_FIELDS} FROM c WHERE c.kind = @kind AND IS_DEFINED(c.location) AND ST_WITHIN(c.location, @area)"
            ),
            parameters: vec![
                param("@kind", json!("latest")),
                param("@area", area.to_geojson()),
            ],
        };
        let mut answer = self.fan_out(query).await?;
        answer.value.sort_by(|a, b| a.device_id.cmp(&b.device_id));
        Ok(answer)
    }

    /// Every drone, by id.
    pub async fn all(&self) -> Result<Answer<Vec<Drone>>, ReadFailure> {
        let query = QueryRequest {
            query: format!(
                "SELECT {DRONE_FIELDS} FROM c WHERE c.kind = @kind AND IS_DEFINED(c.location)"
            ),
            parameters: vec![param("@kind", json!("latest"))],
        };
        let mut answer = self.fan_out(query).await?;
        answer.value.sort_by(|a, b| a.device_id.cmp(&b.device_id));
        Ok(answer)
    }

    /// One drone by a point read; `None` if it has no latest document.
    pub async fn one(&self, device_id: &str) -> Result<Answer<Option<Drone>>, ReadFailure> {
        let id = telemetry::document::document_id(device_id);
        let (doc, cost) = self.container.read_counted(device_id, &id).await?;
        let value = doc
            .and_then(|d| serde_json::from_slice::<Value>(&d.body).ok())
            .filter(|d| d.get("kind").and_then(Value::as_str) == Some("latest"))
            .filter(|d| d.get("location").is_some())
            .and_then(|d| decode_all::<Drone>(vec![d]).pop());
        Ok(Answer { value, cost })
    }

    /// One page of a drone's track, as `request` asks.
    pub async fn track(&self, request: &TrackRequest) -> Result<Answer<TrackPage>, ReadFailure> {
        let (value, cost) = track::read_page(&self.container, &self.options, request).await?;
        Ok(Answer { value, cost })
    }
}

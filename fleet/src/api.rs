//! The read side during the demo: `fleet-api`'s router served in-process over the demo's
//! local endpoint (the live map and the API while the fleet flies), and the report's
//! spatial question asked through it.

use std::net::SocketAddr;

use cosmos::{CosmosClient, CosmosConfig, Credential, MasterKey};
use cosmos_sim::CosmosSim;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The API and the map, served until dropped.
#[derive(Debug)]
pub struct ServedApi {
    url: String,
    stop: CancellationToken,
}

impl Drop for ServedApi {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The answer of `GET /api/drones/near`.
#[derive(Debug, Clone, PartialEq)]
pub struct NearAnswer {
    /// The request sent.
    pub request: String,
    /// Device id and distance in metres, nearest first.
    pub drones: Vec<(String, f64)>,
    /// `x-query-request-charge`.
    pub request_charge: f64,
    /// `x-query-calls`.
    pub calls: u32,
}

/// Why the API could not be served or asked.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The address could not be bound.
    #[error("cannot serve the API on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The client could not be built.
    #[error("{0}")]
    Cosmos(#[from] cosmos::CosmosError),
    /// The request failed or its answer was not a FeatureCollection.
    #[error("GET {request}: {message}")]
    Request {
        /// The request.
        request: String,
        /// What went wrong.
        message: String,
    },
}

impl ServedApi {
    /// Serves the API over `database`/`container` of `sim` on `addr`, the map over
    /// `map_tiles`; when that address is taken, on a free port of the same interface.
    pub async fn start(
        sim: &CosmosSim,
        database: &str,
        container: &str,
        addr: SocketAddr,
        map_tiles: Option<fleet_api::MapTiles>,
    ) -> Result<ServedApi, ApiError> {
        let key = MasterKey::from_base64(sim.key()).expect("the endpoint's key is base64");
        let client = CosmosClient::new(CosmosConfig::new(
            sim.endpoint().parse().expect("the endpoint is a URL"),
            Credential::MasterKey(key),
        ))?;
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => listener,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && addr.port() != 0 => {
                tokio::net::TcpListener::bind(SocketAddr::new(addr.ip(), 0))
                    .await
                    .map_err(|source| ApiError::Bind { addr, source })?
            }
            Err(source) => return Err(ApiError::Bind { addr, source }),
        };
        let bound = listener
            .local_addr()
            .map_err(|source| ApiError::Bind { addr, source })?;
        // The demo's map and report read without credentials (API_ALLOW_ANONYMOUS=true).
        let router = fleet_api::router(
            client.container(database, container),
            fleet_api::ApiOptions {
                map_tiles,
                ..fleet_api::ApiOptions::default()
            },
            fleet_api::Access::anonymous(),
        );
        let stop = CancellationToken::new();
        tokio::spawn(fleet_api::serve(listener, router, stop.clone()));
        Ok(ServedApi {
            url: format!("http://{bound}"),
            stop,
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:8080`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Asks which drones are within `radius_m` of `(lat, lon)`.
    pub async fn near(
        &self,
        (lat, lon): (f64, f64),
        radius_m: f64,
    ) -> Result<NearAnswer, ApiError> {
        let request = format!(
            "{}/api/drones/near?lat={lat}&lon={lon}&radius_m={radius_m}",
            self.url
        );
        let answer = features(&request).await?;
        let drones = answer.by_id(|properties| properties["distanceM"].as_f64());
        Ok(NearAnswer {
            request,
            drones,
            request_charge: answer.request_charge,
            calls: answer.calls,
        })
    }

    /// Every drone's latest document: device id and sequence number.
    pub async fn latest(&self) -> Result<Vec<(String, u64)>, ApiError> {
        let request = format!("{}/api/drones?limit={}", self.url, fleet_api::MAX_LIMIT);
        let answer = features(&request).await?;
        Ok(answer.by_id(|properties| properties["seq"].as_u64()))
    }
}

/// A FeatureCollection answer and its cost headers.
struct Features {
    features: Vec<Value>,
    request_charge: f64,
    calls: u32,
}

impl Features {
    /// Each feature's id with a value read from its properties (features lacking either
    /// are skipped).
    fn by_id<T>(&self, read: impl Fn(&Value) -> Option<T>) -> Vec<(String, T)> {
        self.features
            .iter()
            .filter_map(|f| Some((f["id"].as_str()?.to_owned(), read(&f["properties"])?)))
            .collect()
    }
}

/// GETs `request`, a route answering a FeatureCollection.
async fn features(request: &str) -> Result<Features, ApiError> {
    let fail = |message: String| ApiError::Request {
        request: request.to_owned(),
        message,
    };
    let response = reqwest::get(request)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .unwrap_or_default()
    };
    let request_charge = header("x-query-request-charge").parse().unwrap_or(0.0);
    let calls = header("x-query-calls").parse().unwrap_or(0);
    let status = response.status();
    let body: Value = response.json().await.map_err(|e| fail(e.to_string()))?;
    if !status.is_success() {
        return Err(fail(format!("{status}: {body}")));
    }
    let features = body["features"]
        .as_array()
        .ok_or_else(|| fail(format!("not a FeatureCollection: {body}")))?
        .clone();
    Ok(Features {
        features,
        request_charge,
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_demo_map_uses_the_tile_server_it_is_given_and_none_otherwise() {
        let sim = CosmosSim::builder().start().await.unwrap();
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let tiles = fleet_api::map_tiles(
            Some("http://127.0.0.1:9/tiles/{z}/{x}/{y}.png".into()),
            Some("© Local Tiles".into()),
            None,
            None,
        )
        .unwrap();
        for (given, expected) in [
            (
                tiles,
                serde_json::json!({"url": "http://127.0.0.1:9/tiles/{z}/{x}/{y}.png", "attribution": "© Local Tiles", "proxied": false}),
            ),
            (None, Value::Null),
        ] {
            let api = ServedApi::start(&sim, "db", "c", any, given).await.unwrap();
            let page = reqwest::get(format!("{}/", api.url())).await.unwrap();
            let policy = page.headers()["content-security-policy"]
                .to_str()
                .unwrap()
                .to_owned();
            let config: Value = reqwest::get(format!("{}/map/config.json", api.url()))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(config["tiles"], expected);
            assert_eq!(
                policy.contains("img-src 'self' http://127.0.0.1:9"),
                !expected.is_null(),
                "{policy}"
            );
        }
        sim.shutdown().await;
    }
}

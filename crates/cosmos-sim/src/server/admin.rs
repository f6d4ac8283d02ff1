//! The admin HTTP endpoints under `/_admin/` (no signature needed):
//!
//! | method and path | body | answer |
//! | --- | --- | --- |
//! | `GET /_admin/stats` | | [`crate::Stats`] as JSON: requests, operations, 429s, the heat map |
//! | `GET /_admin/metrics` | | the same counters as Prometheus text |
//! | `GET /_admin/faults` | | the current [`FaultSettings`] |
//! | `POST /_admin/faults` | [`FaultSettings`] (fields optional) | the settings after the change |
//! | `POST /_admin/split` | `{"database","container","rangeId"}` | the two new ranges |
//! | `POST /_admin/throughput` | `{"database","container","ruPerSec"}` | `{"ruPerSec"}` |
//! | `POST /_admin/key` | `{"key"}` (base64) | `{}`; requests signed with another key get 401 |

use super::reply::Reply;
use crate::endpoint_state::EndpointState;
use crate::error::SimError;
use crate::faults::FaultSettings;
use http::Method;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SplitRequest {
    database: String,
    container: String,
    range_id: String,
}

#[derive(Deserialize)]
struct KeyRequest {
    key: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThroughputRequest {
    database: String,
    container: String,
    ru_per_sec: f64,
}

/// Serves one admin request.
pub(super) fn handle(state: &EndpointState, method: &Method, path: &str, body: &[u8]) -> Reply {
    let stats = || state.stats();
    match (method, path.trim_end_matches('/')) {
        (&Method::GET, "/_admin/stats") => Reply::value(200, 0.0, &json!(stats())),
        (&Method::GET, "/_admin/metrics") => {
            Reply::json(200, 0.0, stats().to_prometheus().into_bytes())
        }
        (&Method::GET, "/_admin/faults") => Reply::value(200, 0.0, &json!(state.faults.settings())),
        (&Method::POST, "/_admin/faults") => match serde_json::from_slice::<FaultSettings>(body) {
            Ok(s) => {
                state.faults.update(s);
                Reply::value(200, 0.0, &json!(state.faults.settings()))
            }
            Err(e) => Reply::error(
                400,
                0,
                format!(
                    "expected {{\"latencyMs\",\"errorRate503\",\"timeoutRate\",\"timeoutMs\",\"maxDocumentBytes\"}}: {e}"
                ),
            ),
        },
        (&Method::POST, "/_admin/split") => match serde_json::from_slice::<SplitRequest>(body) {
            Ok(r) => match state.split_range(&r.database, &r.container, &r.range_id) {
                Ok((a, b)) => Reply::value(200, 0.0, &json!([a, b])),
                Err(e) => sim_error(e),
            },
            Err(e) => Reply::error(
                400,
                0,
                format!("expected {{\"database\",\"container\",\"rangeId\"}}: {e}"),
            ),
        },
        (&Method::POST, "/_admin/throughput") => {
            match serde_json::from_slice::<ThroughputRequest>(body) {
                Ok(r) => match state.set_ru_per_sec(&r.database, &r.container, r.ru_per_sec) {
                    Ok(()) => Reply::value(200, 0.0, &json!({"ruPerSec": r.ru_per_sec})),
                    Err(e) => sim_error(e),
                },
                Err(e) => Reply::error(
                    400,
                    0,
                    format!("expected {{\"database\",\"container\",\"ruPerSec\"}}: {e}"),
                ),
            }
        }
        (&Method::POST, "/_admin/key") => match serde_json::from_slice::<KeyRequest>(body) {
            Ok(r) => match state.rotate_key(&r.key) {
                Ok(()) => Reply::value(200, 0.0, &json!({})),
                Err(e) => sim_error(e),
            },
            Err(e) => Reply::error(400, 0, format!("expected {{\"key\"}}: {e}")),
        },
        _ => Reply::error(404, 0, format!("no admin endpoint {method} {path}")),
    }
}

fn sim_error(e: SimError) -> Reply {
    let status = match e {
        SimError::NoContainer(_) | SimError::NoRange(_) => 404,
        _ => 400,
    };
    Reply::error(status, 0, e.to_string())
}

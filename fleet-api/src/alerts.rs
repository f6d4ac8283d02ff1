//! The last alerts, as the alerter records them in its lease container (one document per
//! alert, `kind` `alert`, kept a week): `GET /api/alerts?limit=N` (`Fleet.Read`) answers
//! the newest N (default 50, at most 500), each the alert's CloudEvent with its outcome
//! (`delivered` or `dead_lettered`) and when it was recorded.
//!
//! Cost: one query per range of the lease container (`TOP N ... ORDER BY recordedAtMs`, each
//! range's newest, merged here), a few RU; no container (no alerter ran yet) is an empty list.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use cosmos::{ContainerClient, QueryOptions, QueryRequest, QueryScope, ReadCost};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::access::{Access, Role, guarded};
use crate::budget::{self, Limits};
use crate::upstream;

/// Most alerts one request answers.
const MAX_LIMIT: u32 = 500;
/// Alerts answered when the request names no limit.
const DEFAULT_LIMIT: u32 = 50;

/// Where the alerter records its alerts.
#[derive(Debug, Clone)]
pub struct Alerts {
    container: ContainerClient,
}

#[derive(Deserialize)]
struct Params {
    limit: Option<u32>,
}

impl Alerts {
    /// The alerts recorded in `container` (the alerter's `ALERT_LEASE_CONTAINER`).
    pub fn new(container: ContainerClient) -> Self {
        Alerts { container }
    }

    async fn list(&self, limit: u32) -> Response {
        // The limit is a checked number, written into the text (the local endpoint takes
        // no parameter after TOP).
        let query = QueryRequest {
            query: format!(
                "SELECT TOP {limit} c.event, c.outcome, c.recordedAtMs FROM c \
                 WHERE c.kind = 'alert' ORDER BY c.recordedAtMs DESC"
            ),
            parameters: Vec::new(),
        };
        let answer = self
            .container
            .query_counted(&query, &QueryScope::AllRanges, &QueryOptions::default())
            .await;
        let (mut alerts, cost) = match answer {
            Ok(answer) => (answer.documents, answer.cost),
            Err(f) if f.source.is_not_found() => (Vec::new(), f.cost),
            Err(f) => {
                tracing::warn!(error = %f.source, "reading the alerts failed");
                let body = json!({"error": "cosmos", "message": upstream::FAILED});
                return (StatusCode::BAD_GATEWAY, axum::Json(body)).into_response();
            }
        };
        // Each range answered its newest: the newest of all, merged.
        alerts.sort_by_key(|a| std::cmp::Reverse(a["recordedAtMs"].as_i64().unwrap_or(0)));
        alerts.truncate(limit as usize);
        let mut response = axum::Json(json!({"alerts": alerts})).into_response();
        response.extensions_mut().insert::<ReadCost>(cost);
        response
    }

    /// The route `GET /api/alerts`, for `Fleet.Read`, held to the caller's RU budget.
    pub fn routes<S>(self, access: &Access, limits: Arc<Limits>) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        let route = get(
            move |State(alerts): State<Alerts>, Query(params): Query<Params>| async move {
                match params.limit.unwrap_or(DEFAULT_LIMIT) {
                    n @ 1..=MAX_LIMIT => alerts.list(n).await,
                    _ => {
                        let message = format!("limit: a number from 1 to {MAX_LIMIT}");
                        let body: Value = json!({"error": "bad_request", "message": message});
                        (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
                    }
                }
            },
        )
        .route_layer(axum::middleware::from_fn_with_state(limits, budget::budget));
        Router::new()
            .route("/api/alerts", guarded(access, Role::Read, route))
            .with_state(self)
    }
}

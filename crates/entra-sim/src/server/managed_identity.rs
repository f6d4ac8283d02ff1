//! The managed identity endpoint as App Service (and Azure Functions) exposes it to an app:
//! `GET {IDENTITY_ENDPOINT}?resource=...&api-version=2019-08-01` with the secret of
//! `IDENTITY_HEADER` in `X-IDENTITY-HEADER`; `client_id`, `object_id` or `mi_res_id` choose a
//! user-assigned identity. The answer is `access_token`, `expires_on` (epoch seconds, as a
//! string), `resource`, `token_type` and `client_id`; a refusal is `statusCode` and
//! `message`. (learn.microsoft.com/azure/app-service/overview-managed-identity, "REST
//! endpoint reference".)

use super::{Issuer, scopes};
use crate::tokens::{self, Audience, Subject};
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// The only API version answered.
const API_VERSION: &str = "2019-08-01";

/// The query parameters the endpoint reads.
#[derive(Debug, Deserialize)]
pub struct IdentityQuery {
    resource: Option<String>,
    #[serde(rename = "api-version")]
    api_version: Option<String>,
    client_id: Option<String>,
    object_id: Option<String>,
    mi_res_id: Option<String>,
}

fn refuse(status: StatusCode, message: String) -> (StatusCode, Json<Value>) {
    (
        status,
        Json(json!({"statusCode": status.as_u16(), "message": message})),
    )
}

/// The endpoint.
pub async fn token(
    State(issuer): State<Arc<Issuer>>,
    headers: HeaderMap,
    Query(query): Query<IdentityQuery>,
) -> (StatusCode, Json<Value>) {
    let header = headers
        .get("x-identity-header")
        .and_then(|v| v.to_str().ok());
    if header != Some(issuer.directory.identity_header.as_str()) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "The X-IDENTITY-HEADER header is missing or wrong.".into(),
        );
    }
    if query.api_version.as_deref() != Some(API_VERSION) {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("api-version must be {API_VERSION}."),
        );
    }
    let Some(resource) = query.resource.as_deref() else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "The resource parameter is missing.".into(),
        );
    };
    if query.mi_res_id.is_some() {
        return refuse(
            StatusCode::BAD_REQUEST,
            "Selecting an identity by mi_res_id is not supported here; use client_id or object_id."
                .into(),
        );
    }
    let directory = &issuer.directory;
    let Some(identity) = directory.identity(query.client_id.as_deref(), query.object_id.as_deref())
    else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "No managed identity matches the request.".into(),
        );
    };
    let resource = match scopes::resource(directory, resource) {
        Ok(r) => r,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let audience = Audience {
        aud: &resource.aud,
        resource: resource.index,
        scp: Vec::new(),
        version: directory.token_version(resource.index),
    };
    let claims = tokens::access_claims(
        &issuer.issuer(),
        &directory.tenant_id,
        tokens::Validity::now_by(directory),
        &Subject::Identity(identity),
        &audience,
    );
    match issuer.sign(&claims) {
        Ok(token) => (
            StatusCode::OK,
            Json(json!({
                "access_token": token,
                "expires_on": claims["exp"].to_string(),
                "resource": resource.aud,
                "token_type": "Bearer",
                "client_id": identity.identity.client_id,
            })),
        ),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

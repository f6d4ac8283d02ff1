//! OpenID Connect discovery: the tenant's v2.0 configuration document (the fields Entra
//! publishes that this issuer backs, with its own URLs), the JWKS, and the key rotation call.

use super::Issuer;
use crate::aadsts::Aadsts;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;

/// `GET /{tenant}/v2.0/.well-known/openid-configuration`.
pub async fn openid_configuration(
    State(issuer): State<Arc<Issuer>>,
    Path(tenant): Path<String>,
) -> Result<Json<Value>, Aadsts> {
    issuer.check_tenant(&tenant)?;
    let authority = issuer.authority();
    Ok(Json(json!({
        "token_endpoint": issuer.token_endpoint(),
        "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt", "client_secret_basic"],
        "jwks_uri": format!("{authority}/discovery/v2.0/keys"),
        "response_modes_supported": ["query", "fragment"],
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "response_types_supported": ["code"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "issuer": issuer.issuer(),
        "request_uri_parameter_supported": false,
        "authorization_endpoint": format!("{authority}/oauth2/v2.0/authorize"),
        "claims_supported": ["sub", "iss", "aud", "exp", "iat", "nonce", "preferred_username", "name", "tid", "ver", "oid"],
        "tenant_region_scope": "NA",
        "cloud_instance_name": "microsoftonline.com",
        "cloud_graph_host_name": "graph.windows.net",
        "msgraph_host": "graph.microsoft.com",
    })))
}

/// `GET /{tenant}/discovery/v2.0/keys`.
pub async fn keys(
    State(issuer): State<Arc<Issuer>>,
    Path(tenant): Path<String>,
) -> Result<Json<Value>, Aadsts> {
    issuer.check_tenant(&tenant)?;
    Ok(Json(issuer.jwks()))
}

/// `POST /_sim/keys/rotate`: signs with a new key from now on; answers `{"kid": ...}`.
pub async fn rotate(State(issuer): State<Arc<Issuer>>) -> (StatusCode, Json<Value>) {
    match issuer.rotate_keys() {
        Ok(kid) => (StatusCode::OK, Json(json!({ "kid": kid }))),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        ),
    }
}

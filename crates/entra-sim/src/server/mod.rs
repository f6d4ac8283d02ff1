//! The HTTP side: the shared state of one issuer ([`Issuer`]: directory, keys, outstanding
//! codes and refresh tokens, its own URLs) and the router over the endpoints, one file each:
//! [`discovery`] (OpenID configuration, keys, key rotation), [`authorize`], [`token`],
//! [`managed_identity`]; [`scopes`] reads `scope` parameters, [`grants`] keeps what the authorization endpoint handed out until
//! the token endpoint redeems it.

mod authorize;
mod discovery;
mod grants;
mod managed_identity;
mod scopes;
mod token;

use crate::aadsts::Aadsts;
use crate::directory::Directory;
use crate::keys::{KeyError, KeySet};
use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use grants::Grants;
use std::sync::{Arc, Mutex, RwLock};
use tower_http::cors::CorsLayer;

/// Where the managed identity endpoint listens (what `IDENTITY_ENDPOINT` names).
pub const MANAGED_IDENTITY_PATH: &str = "/msi/token";
/// Where a POST rotates the signing key.
pub const ROTATE_KEYS_PATH: &str = "/_sim/keys/rotate";

/// One issuer's state, shared by the endpoints.
pub struct Issuer {
    /// The directory.
    pub directory: Directory,
    /// `scheme://host:port`, without a trailing slash.
    pub base: String,
    keys: RwLock<KeySet>,
    grants: Mutex<Grants>,
}

impl Issuer {
    /// An issuer for `directory` at `base`, with a new signing key.
    pub fn new(directory: Directory, base: String) -> Result<Issuer, KeyError> {
        Ok(Issuer {
            directory,
            base,
            keys: RwLock::new(KeySet::generate()?),
            grants: Mutex::new(Grants::default()),
        })
    }

    /// `{base}/{tenant}`: what MSAL takes as `authority`.
    pub fn authority(&self) -> String {
        format!("{}/{}", self.base, self.directory.tenant_id)
    }

    /// `iss` of every token: `{base}/{tenant}/v2.0`.
    pub fn issuer(&self) -> String {
        format!("{}/v2.0", self.authority())
    }

    /// The token endpoint (also the audience of client assertions).
    pub fn token_endpoint(&self) -> String {
        format!("{}/oauth2/v2.0/token", self.authority())
    }

    /// `{base}/cluster`: the local stand-in for a Kubernetes cluster's service-account
    /// issuer (its tokens are signed with this issuer's keys).
    pub fn cluster_issuer(&self) -> String {
        format!("{}/cluster", self.base)
    }

    #[cfg(feature = "test-support")]
    /// A service-account token of the cluster issuer for `subject`, as the AKS workload
    /// identity webhook projects into a pod (`AZURE_FEDERATED_TOKEN_FILE`), valid an hour.
    pub fn service_account_token(&self, subject: &str) -> Result<String, KeyError> {
        let now = crate::tokens::now();
        self.sign(&serde_json::json!({
            "iss": self.cluster_issuer(),
            "sub": subject,
            "aud": crate::assertion::TOKEN_EXCHANGE_AUDIENCE,
            "iat": now,
            "nbf": now,
            "exp": now + 3600,
        }))
    }

    /// Signs `claims` with the current key.
    pub fn sign(&self, claims: &serde_json::Value) -> Result<String, KeyError> {
        self.keys.read().expect("keys lock").sign(claims)
    }

    /// Signs with a new key from now on; the previous one stays published. Returns the new kid.
    pub fn rotate_keys(&self) -> Result<String, KeyError> {
        self.keys.write().expect("keys lock").rotate()
    }

    /// The JWKS document.
    pub fn jwks(&self) -> serde_json::Value {
        self.keys.read().expect("keys lock").jwks()
    }

    fn grants(&self) -> std::sync::MutexGuard<'_, Grants> {
        self.grants.lock().expect("grants lock")
    }

    /// Refuses a path whose tenant segment is not this tenant.
    fn check_tenant(&self, tenant: &str) -> Result<(), Aadsts> {
        if tenant == self.directory.tenant_id {
            Ok(())
        } else {
            Err(Aadsts::TenantNotFound(tenant.to_owned()))
        }
    }
}

/// The router over every endpoint. Browsers may call discovery, keys and the token
/// endpoint from any origin (as Entra allows for single-page apps).
pub fn router(issuer: Arc<Issuer>) -> Router {
    let cross_origin = Router::new()
        .route(
            "/:tenant/v2.0/.well-known/openid-configuration",
            get(discovery::openid_configuration),
        )
        .route("/:tenant/discovery/v2.0/keys", get(discovery::keys))
        .route("/:tenant/oauth2/v2.0/token", post(token::token))
        .layer(CorsLayer::permissive());
    Router::new()
        .route("/:tenant/oauth2/v2.0/authorize", get(authorize::authorize))
        .route(MANAGED_IDENTITY_PATH, get(managed_identity::token))
        .route(ROTATE_KEYS_PATH, post(discovery::rotate))
        .merge(cross_origin)
        .with_state(issuer)
}

/// Why an endpoint did not issue: a refusal as Entra words it, or the issuer's own failure.
pub enum Failure {
    /// Refused.
    Refused(Aadsts),
    /// The signing key failed.
    Key(KeyError),
}

impl From<Aadsts> for Failure {
    fn from(e: Aadsts) -> Self {
        Failure::Refused(e)
    }
}

impl From<KeyError> for Failure {
    fn from(e: KeyError) -> Self {
        Failure::Key(e)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        match self {
            Failure::Refused(e) => e.into_response(),
            Failure::Key(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        }
    }
}

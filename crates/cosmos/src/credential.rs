//! How requests are authorized: the account master key (each request signed) or Entra ID
//! bearer tokens from a pluggable [`TokenCredential`]. Neither ever shows in `Debug` output.

use std::fmt;
use std::sync::Arc;

use cosmos_wire::auth::{MasterKey, aad_authorization};
use futures::future::BoxFuture;

use crate::CosmosError;

/// Produces Entra ID access tokens for the scope `https://cosmos.azure.com/.default`.
///
/// Implementations cache and renew tokens themselves; the client asks for one per request.
pub trait TokenCredential: Send + Sync {
    /// A currently valid access token.
    fn token(&self) -> BoxFuture<'_, Result<String, CosmosError>>;

    /// The service refused a token this credential gave (401/403): tokens it keeps are
    /// dropped, so that the next request carries a newly issued one.
    fn refused(&self) {}
}

/// The credential of a client.
#[derive(Clone)]
pub enum Credential {
    /// The account key: every request is signed with HMAC-SHA256.
    MasterKey(MasterKey),
    /// Entra ID bearer tokens.
    Token(Arc<dyn TokenCredential>),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MasterKey(_) => f.write_str("Credential::MasterKey(<redacted>)"),
            Self::Token(_) => f.write_str("Credential::Token(<redacted>)"),
        }
    }
}

impl Credential {
    /// The service refused this credential: a token credential drops the tokens it keeps.
    pub(crate) fn refused(&self) {
        if let Self::Token(source) = self {
            source.refused();
        }
    }

    /// The `Authorization` header value for a request on `resource_type`/`resource_link`
    /// (see `cosmos_wire::auth::resource_for_path`) sent with the `x-ms-date` value `date`.
    pub(crate) async fn authorization(
        &self,
        verb: &str,
        resource_type: &str,
        resource_link: &str,
        date: &str,
    ) -> Result<String, CosmosError> {
        match self {
            Self::MasterKey(key) => Ok(key.authorization(verb, resource_type, resource_link, date)),
            Self::Token(source) => Ok(aad_authorization(&source.token().await?)),
        }
    }
}

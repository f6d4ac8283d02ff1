//! The fleet's reading of OIDC bearer tokens (Entra ID and any OpenID Connect issuer): the
//! issuer and audience configured, and the `roles` claim (where Entra ID puts a user's or
//! application's app roles) as the fleet's [`Role`]s. The check of the token itself
//! (discovery, keys, signature, issuer, audience, times) is `oidc-verify`'s.

use oidc_verify::Verifier;
use serde::Deserialize;

use super::Role;

pub use oidc_verify::DiscoveryError as OidcError;

/// The issuer and audience tokens must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcSettings {
    /// The issuer, exactly as tokens' `iss` names it (discovery is under it).
    pub issuer: String,
    /// The audience tokens' `aud` must name (the API's application id or id URI).
    pub audience: String,
}

/// A token's claims the API reads.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    roles: Vec<String>,
}

/// A verified token: its subject and the roles it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// `sub`.
    pub subject: String,
    /// The fleet's roles in `roles` (others are ignored).
    pub roles: Vec<Role>,
}

/// The verifier of one issuer's tokens for the API's audience.
#[derive(Debug)]
pub struct Oidc {
    verifier: Verifier,
}

impl Oidc {
    /// Reads the issuer's discovery document and its keys.
    pub async fn discover(settings: OidcSettings) -> Result<Oidc, OidcError> {
        let verifier = Verifier::discover(settings.issuer, vec![settings.audience], None).await?;
        Ok(Oidc { verifier })
    }

    /// Checks `token`; the message of an error says why it was refused.
    pub async fn verify(&self, token: &str) -> Result<Verified, String> {
        let claims: Claims = self
            .verifier
            .verify(token)
            .await
            .map_err(|refusal| refusal.to_string())?;
        Ok(Verified {
            subject: claims.sub,
            roles: claims.roles.iter().filter_map(|r| r.parse().ok()).collect(),
        })
    }
}

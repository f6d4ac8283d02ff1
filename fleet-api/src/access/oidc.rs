//! OIDC bearer tokens (Entra ID and any OpenID Connect issuer): the issuer's discovery
//! document, its signing keys (JWKS) by `kid`, and the check of a token: RS256 only, the
//! configured issuer and audience, `exp` and `nbf` with [`CLOCK_SKEW`], and the `roles` claim
//! (where Entra ID puts a user's or application's app roles).
//!
//! The keys are fetched at start and again when a token names a `kid` the API does not
//! know (the issuer rotated its keys), at most once per [`REFRESH_EVERY`]: a stream of
//! tokens with made-up `kid`s costs the issuer one request per interval, not one each.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;
use url::Url;

use super::Role;

/// How far a token's `exp` and `nbf` may be off this host's clock.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);
/// Least time between two fetches of the keys on an unknown `kid`.
pub const REFRESH_EVERY: Duration = Duration::from_secs(30);
/// Longest wait for the issuer's discovery document or keys.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The issuer and audience tokens must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcSettings {
    /// The issuer, exactly as tokens' `iss` names it (discovery is under it).
    pub issuer: String,
    /// The audience tokens' `aud` must name (the API's application id or id URI).
    pub audience: String,
}

/// Why the issuer's keys could not be had.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// A request to the issuer failed.
    #[error("GET {url}: {message}")]
    Fetch {
        /// What was asked.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The discovery document does not fit the configured issuer.
    #[error(
        "the discovery document at {url} names issuer '{found}', not '{expected}' (API_OIDC_ISSUER)"
    )]
    IssuerMismatch {
        /// Where the document came from.
        url: String,
        /// The configured issuer.
        expected: String,
        /// What the document says.
        found: String,
    },
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

/// The verifier of one issuer's tokens.
pub struct Oidc {
    settings: OidcSettings,
    jwks_uri: Url,
    http: reqwest::Client,
    keys: RwLock<HashMap<String, DecodingKey>>,
    /// When an unknown `kid` last made the keys be fetched.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("settings", &self.settings)
            .field("jwks_uri", &self.jwks_uri.as_str())
            .finish_non_exhaustive()
    }
}

impl Oidc {
    /// Reads the issuer's discovery document and its keys.
    pub async fn discover(settings: OidcSettings) -> Result<Oidc, OidcError> {
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| OidcError::Fetch {
                url: settings.issuer.clone(),
                message: e.to_string(),
            })?;
        let url = format!(
            "{}/.well-known/openid-configuration",
            settings.issuer.trim_end_matches('/')
        );
        let document = get_json(&http, &url).await?;
        let found = document["issuer"].as_str().unwrap_or_default();
        if found != settings.issuer {
            return Err(OidcError::IssuerMismatch {
                url,
                expected: settings.issuer.clone(),
                found: found.to_string(),
            });
        }
        let jwks_uri = document["jwks_uri"]
            .as_str()
            .and_then(|u| Url::parse(u).ok())
            .ok_or_else(|| OidcError::Fetch {
                url: url.clone(),
                message: "no jwks_uri URL in the discovery document".into(),
            })?;
        let keys = signing_keys(&get_json(&http, jwks_uri.as_str()).await?);
        tracing::info!(issuer = %settings.issuer, keys = keys.len(), "OIDC issuer's signing keys read");
        Ok(Oidc {
            settings,
            jwks_uri,
            http,
            keys: RwLock::new(keys),
            refreshed: tokio::sync::Mutex::new(None),
        })
    }

    /// Checks `token`; the message of an error says why it was refused.
    pub async fn verify(&self, token: &str) -> Result<Verified, String> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| format!("the bearer token is not a signed JWT ({e})"))?;
        if header.alg != Algorithm::RS256 {
            return Err(format!(
                "the token is signed with {:?}; only RS256 is accepted",
                header.alg
            ));
        }
        let kid = header.kid.ok_or("the token names no signing key (kid)")?;
        let key = match self.key(&kid) {
            Some(key) => key,
            None => {
                self.refresh_for(&kid).await;
                self.key(&kid)
                    .ok_or_else(|| format!("the issuer has no signing key '{kid}'"))?
            }
        };
        let mut validation = Validation::new(Algorithm::RS256);
        validation.leeway = CLOCK_SKEW.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| self.refusal(&e))?;
        Ok(Verified {
            subject: data.claims.sub,
            roles: data
                .claims
                .roles
                .iter()
                .filter_map(|r| r.parse().ok())
                .collect(),
        })
    }

    /// Why a token that decoded was refused, in words a caller can act on.
    fn refusal(&self, error: &jsonwebtoken::errors::Error) -> String {
        use jsonwebtoken::errors::ErrorKind;
        let skew = CLOCK_SKEW.as_secs();
        match error.kind() {
            ErrorKind::ExpiredSignature => {
                format!("the token has expired (exp, with {skew} s of clock skew): get a new one")
            }
            ErrorKind::ImmatureSignature => {
                format!("the token is not valid yet (nbf, with {skew} s of clock skew)")
            }
            ErrorKind::InvalidAudience => format!(
                "the token is for another audience (aud); this API is {}",
                self.settings.audience
            ),
            ErrorKind::InvalidIssuer => format!(
                "the token is from another issuer (iss); this API trusts {}",
                self.settings.issuer
            ),
            ErrorKind::InvalidSignature => {
                "the token's signature does not match its signing key".to_string()
            }
            ErrorKind::MissingRequiredClaim(claim) => format!("the token has no {claim} claim"),
            _ => format!("the token is refused: {error}"),
        }
    }

    fn key(&self, kid: &str) -> Option<DecodingKey> {
        self.keys
            .read()
            .expect("the key map is never left poisoned")
            .get(kid)
            .cloned()
    }

    /// Fetches the keys again for an unknown `kid`, unless that was done less than
    /// [`REFRESH_EVERY`] ago (or another request already brought the key in).
    async fn refresh_for(&self, kid: &str) {
        let mut refreshed = self.refreshed.lock().await;
        if self.key(kid).is_some() || refreshed.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return;
        }
        *refreshed = Some(Instant::now());
        match get_json(&self.http, self.jwks_uri.as_str()).await {
            Ok(jwks) => {
                let keys = signing_keys(&jwks);
                tracing::info!(kid, keys = keys.len(), "OIDC signing keys fetched again");
                *self
                    .keys
                    .write()
                    .expect("the key map is never left poisoned") = keys;
            }
            Err(e) => tracing::warn!(kid, error = %e, "cannot fetch the OIDC signing keys"),
        }
    }
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, OidcError> {
    let fail = |message: String| OidcError::Fetch {
        url: url.to_string(),
        message,
    };
    let response = http
        .get(url)
        .send()
        .await
        .map_err(|e| fail(e.to_string()))?;
    if !response.status().is_success() {
        return Err(fail(format!("answered {}", response.status())));
    }
    response.json().await.map_err(|e| fail(e.to_string()))
}

/// The RSA signing keys of a JWKS, by `kid`; keys of other types or uses, and keys this
/// library cannot read, are left out (one odd key does not lose the others).
fn signing_keys(jwks: &Value) -> HashMap<String, DecodingKey> {
    let listed = jwks["keys"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    listed
        .iter()
        .filter_map(|key| serde_json::from_value::<Jwk>(key.clone()).ok())
        .filter(|jwk| matches!(jwk.algorithm, AlgorithmParameters::RSA(_)))
        .filter(|jwk| {
            matches!(
                jwk.common.public_key_use,
                None | Some(PublicKeyUse::Signature)
            )
        })
        .filter_map(|jwk| {
            Some((
                jwk.common.key_id.clone()?,
                DecodingKey::from_jwk(&jwk).ok()?,
            ))
        })
        .collect()
}

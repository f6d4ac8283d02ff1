//! The check of OpenID Connect bearer tokens (Entra ID and any OIDC issuer) that a resource
//! server makes: the issuer's discovery document, its signing keys (JWKS) by `kid`, RS256
//! only, the issuer, one of the accepted audiences, `exp` and `nbf` with [`CLOCK_SKEW`].
//! What a token grants (roles, tenant, principal) is the caller's: [`Verifier::verify`]
//! returns the claims as the caller's own `Deserialize` type.
//!
//! The keys are fetched at start and again when a token names a `kid` the verifier does not
//! know (the issuer rotated its keys), at most once per [`REFRESH_EVERY`]: a stream of tokens
//! with made-up `kid`s costs the issuer one request per interval, not one each.

mod jwks;
mod refusal;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde::de::DeserializeOwned;

pub use jwks::DiscoveryError;
pub use refusal::Refusal;

/// How far a token's `exp` and `nbf` may be off this host's clock.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);
/// Least time between two fetches of the keys on an unknown `kid`.
pub const REFRESH_EVERY: Duration = Duration::from_secs(30);

/// The caller's claims, with the times this crate checks.
#[derive(Deserialize)]
struct Timed<C> {
    exp: u64,
    nbf: Option<u64>,
    #[serde(flatten)]
    claims: C,
}

/// The verifier of one issuer's tokens for one or more audiences.
#[derive(Debug)]
pub struct Verifier {
    issuer: String,
    audiences: Vec<String>,
    keys: jwks::Keys,
}

impl Verifier {
    /// Reads `issuer`'s discovery document (under the issuer, exactly as tokens name it in
    /// `iss`) and its keys, over HTTPS trusting `ca_pem` (PEM) besides the platform's roots;
    /// tokens must name one of `audiences` in `aud`.
    pub async fn discover(
        issuer: impl Into<String>,
        audiences: Vec<String>,
        ca_pem: Option<&str>,
    ) -> Result<Verifier, DiscoveryError> {
        let issuer = issuer.into();
        let keys = jwks::Keys::discover(&issuer, ca_pem).await?;
        Ok(Verifier {
            issuer,
            audiences,
            keys,
        })
    }

    /// The issuer trusted.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The audiences accepted.
    pub fn audiences(&self) -> &[String] {
        &self.audiences
    }

    /// Checks `token` and returns its claims; a [`Refusal`] says why it was refused.
    pub async fn verify<C: DeserializeOwned>(&self, token: &str) -> Result<C, Refusal> {
        self.verify_at(token, SystemTime::now()).await
    }

    /// [`Verifier::verify`], with `now` the time the token's `exp` and `nbf` are held to.
    pub async fn verify_at<C: DeserializeOwned>(
        &self,
        token: &str,
        now: SystemTime,
    ) -> Result<C, Refusal> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| Refusal::NotAJwt(e.to_string()))?;
        if header.alg != Algorithm::RS256 {
            return Err(Refusal::Algorithm(format!("{:?}", header.alg)));
        }
        let kid = header.kid.ok_or(Refusal::NoKeyId)?;
        let key = self.keys.get(&kid).await.ok_or(Refusal::UnknownKey(kid))?;
        let mut validation = Validation::new(Algorithm::RS256);
        // The times are checked below, where the refusal can name them.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&self.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Timed<C>>(token, &key, &validation)
            .map_err(|e| self.refusal(token, &e))?;
        let now = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let skew = CLOCK_SKEW.as_secs();
        let Timed { exp, nbf, claims } = data.claims;
        if exp.saturating_add(skew) < now {
            return Err(Refusal::Expired { exp, now });
        }
        if let Some(nbf) = nbf.filter(|nbf| nbf.saturating_sub(skew) > now) {
            return Err(Refusal::NotYetValid { nbf, now });
        }
        Ok(claims)
    }

    fn refusal(&self, token: &str, error: &jsonwebtoken::errors::Error) -> Refusal {
        use jsonwebtoken::errors::ErrorKind;
        match error.kind() {
            ErrorKind::InvalidAudience => Refusal::Audience {
                found: audiences_of(token),
                accepted: self.audiences.clone(),
            },
            ErrorKind::InvalidIssuer => Refusal::Issuer {
                trusted: self.issuer.clone(),
            },
            ErrorKind::InvalidSignature => Refusal::Signature,
            ErrorKind::MissingRequiredClaim(claim) => Refusal::MissingClaim(claim.clone()),
            _ => Refusal::Other(error.to_string()),
        }
    }
}

/// The audiences `token` names; read only once its signature has been checked (the audience
/// is checked after the signature), to say what it was for.
fn audiences_of(token: &str) -> Vec<String> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    #[derive(Deserialize)]
    struct WithAud {
        aud: Option<Aud>,
    }
    match jsonwebtoken::dangerous::insecure_decode::<WithAud>(token).map(|d| d.claims.aud) {
        Ok(Some(Aud::One(aud))) => vec![aud],
        Ok(Some(Aud::Many(auds))) => auds,
        _ => Vec::new(),
    }
}

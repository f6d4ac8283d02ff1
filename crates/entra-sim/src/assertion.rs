//! Client assertions (certificate credentials): a JWT the client signs with the key of a
//! certificate registered on its app, named in the header by `x5t` (SHA-1 thumbprint, with
//! RS256) or `x5t#S256` (SHA-256 thumbprint, with PS256, which MSAL sends when it has the
//! certificate); `aud` the token endpoint, `iss` and `sub` the client id, `exp` in the
//! future (learn.microsoft.com/entra/identity-platform/certificate-credentials); and
//! federated assertions (workload identity federation): a service-account token of the
//! local cluster issuer, signed with the issuer's own keys, `aud` `api://AzureADTokenExchange`
//! and `sub` one of the app's federated subjects
//! (learn.microsoft.com/entra/workload-id/workload-identity-federation).

use crate::aadsts::Aadsts;
use crate::directory::AppEntry;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// The `client_assertion_type` of a JWT client assertion.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

#[derive(Deserialize)]
struct Claims {
    sub: String,
}

/// The audience Entra expects of a federated assertion.
pub const TOKEN_EXCHANGE_AUDIENCE: &str = "api://AzureADTokenExchange";

/// Whether `assertion` claims to be federated (it names no certificate thumbprint).
pub fn is_federated(assertion: &str) -> bool {
    jsonwebtoken::decode_header(assertion)
        .is_ok_and(|header| header.x5t.is_none() && header.x5t_s256.is_none())
}

/// Checks a federated `assertion` for `app`: signed by one of `jwks`'s keys (the cluster
/// issuer's), from `cluster_issuer`, for [`TOKEN_EXCHANGE_AUDIENCE`], about one of the
/// app's federated subjects.
pub fn verify_federated(
    assertion: &str,
    app: &AppEntry,
    cluster_issuer: &str,
    jwks: &jsonwebtoken::jwk::JwkSet,
) -> Result<(), Aadsts> {
    let header = jsonwebtoken::decode_header(assertion)
        .map_err(|e| Aadsts::AssertionMalformed(e.to_string()))?;
    let key = header
        .kid
        .as_deref()
        .and_then(|kid| jwks.find(kid))
        .and_then(|jwk| DecodingKey::from_jwk(jwk).ok())
        .ok_or_else(|| {
            Aadsts::AssertionSignature("The assertion's signing key is not the issuer's.".into())
        })?;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.validate_aud = false;
    validation.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
    let data =
        jsonwebtoken::decode::<Federated>(assertion, &key, &validation).map_err(|e| {
            match e.kind() {
                ErrorKind::InvalidSignature => {
                    Aadsts::AssertionSignature("The signature does not verify.".into())
                }
                ErrorKind::ExpiredSignature | ErrorKind::ImmatureSignature => {
                    Aadsts::AssertionTimeRange
                }
                _ => Aadsts::AssertionMalformed(e.to_string()),
            }
        })?;
    let Federated { iss, sub, aud } = data.claims;
    if iss != cluster_issuer
        || aud != TOKEN_EXCHANGE_AUDIENCE
        || !app.app.federated_subjects.contains(&sub)
    {
        return Err(Aadsts::NoFederatedMatch {
            issuer: iss,
            subject: sub,
            audience: aud,
        });
    }
    Ok(())
}

#[derive(Deserialize)]
struct Federated {
    iss: String,
    sub: String,
    aud: String,
}

/// Checks `assertion` for `app` at `token_endpoint`.
pub fn verify(assertion: &str, app: &AppEntry, token_endpoint: &str) -> Result<(), Aadsts> {
    let header = jsonwebtoken::decode_header(assertion)
        .map_err(|e| Aadsts::AssertionMalformed(e.to_string()))?;
    if !matches!(header.alg, Algorithm::RS256 | Algorithm::PS256) {
        return Err(Aadsts::AssertionMalformed(format!(
            "Unsupported algorithm {:?}.",
            header.alg
        )));
    }
    // MSAL pads its base64url thumbprints; RFC 7515 does not: read both.
    let thumbprint = |value: &Option<String>| {
        value
            .as_ref()
            .and_then(|v| B64.decode(v.trim_end_matches('=')).ok())
    };
    let (sha1, sha256) = (thumbprint(&header.x5t), thumbprint(&header.x5t_s256));
    let certificate = app
        .certificates
        .iter()
        .find(|c| sha1.as_ref() == Some(&c.sha1) || sha256.as_ref() == Some(&c.sha256))
        .ok_or_else(|| {
            Aadsts::AssertionSignature(format!(
                "The certificate with identifier used to sign the client assertion is not registered on application '{}'.",
                app.app.client_id
            ))
        })?;
    let mut validation = Validation::new(header.alg);
    validation.set_audience(&[token_endpoint]);
    validation.set_issuer(&[&app.app.client_id]);
    validation.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
    let key = DecodingKey::from_rsa_der(&certificate.public_key);
    let data = jsonwebtoken::decode::<Claims>(assertion, &key, &validation).map_err(|e| match e
        .kind()
    {
        ErrorKind::InvalidSignature => {
            Aadsts::AssertionSignature("The signature does not verify.".into())
        }
        ErrorKind::ExpiredSignature | ErrorKind::ImmatureSignature => Aadsts::AssertionTimeRange,
        ErrorKind::InvalidAudience => Aadsts::AssertionAudience,
        ErrorKind::InvalidIssuer => Aadsts::AssertionSubject,
        _ => Aadsts::AssertionMalformed(e.to_string()),
    })?;
    if data.claims.sub != app.app.client_id {
        return Err(Aadsts::AssertionSubject);
    }
    Ok(())
}

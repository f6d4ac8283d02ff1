//! An issuer's signing keys: found through its discovery document, read from its JWKS, and
//! read again (rate-limited) when a token names a `kid` not among them. A set read again
//! replaces the one in hand only if it holds a usable key: a failed fetch or an empty set
//! keeps the last good keys.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use jsonwebtoken::DecodingKey;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use serde_json::Value;
use url::Url;

use crate::REFRESH_EVERY;

/// Longest wait for the issuer's discovery document or keys.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the issuer's keys could not be had.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// A request to the issuer failed.
    #[error("GET {url}: {message}")]
    Fetch {
        /// What was asked.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The CA certificate to trust is not PEM.
    #[error("the issuer's CA certificate is not PEM: {0}")]
    Ca(String),
    /// The discovery document does not fit the configured issuer.
    #[error("the discovery document at {url} names issuer '{found}', not '{expected}'")]
    IssuerMismatch {
        /// Where the document came from.
        url: String,
        /// The configured issuer.
        expected: String,
        /// What the document says.
        found: String,
    },
}

/// The signing keys of one issuer, by `kid`.
pub(crate) struct Keys {
    jwks_uri: Url,
    http: reqwest::Client,
    by_kid: RwLock<HashMap<String, DecodingKey>>,
    /// When an unknown `kid` last made the keys be fetched.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("jwks_uri", &self.jwks_uri.as_str())
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// Reads `issuer`'s discovery document, checks that it names `issuer`, and reads the keys
    /// its `jwks_uri` names; over HTTPS, trusting `ca_pem` besides the platform's roots.
    pub(crate) async fn discover(
        issuer: &str,
        ca_pem: Option<&str>,
    ) -> Result<Keys, DiscoveryError> {
        let mut http = reqwest::Client::builder().timeout(FETCH_TIMEOUT);
        if let Some(pem) = ca_pem {
            let ca = reqwest::Certificate::from_pem(pem.as_bytes())
                .map_err(|e| DiscoveryError::Ca(e.to_string()))?;
            http = http.add_root_certificate(ca);
        }
        let http = http.build().map_err(|e| DiscoveryError::Fetch {
            url: issuer.to_string(),
            message: e.to_string(),
        })?;
        let url = format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        );
        let document = get_json(&http, &url).await?;
        let found = document["issuer"].as_str().unwrap_or_default();
        if found != issuer {
            return Err(DiscoveryError::IssuerMismatch {
                url,
                expected: issuer.to_string(),
                found: found.to_string(),
            });
        }
        let jwks_uri = document["jwks_uri"]
            .as_str()
            .and_then(|u| Url::parse(u).ok())
            .ok_or_else(|| DiscoveryError::Fetch {
                url: url.clone(),
                message: "no jwks_uri URL in the discovery document".into(),
            })?;
        let by_kid = signing_keys(&get_json(&http, jwks_uri.as_str()).await?);
        tracing::info!(
            issuer,
            keys = by_kid.len(),
            "OIDC issuer's signing keys read"
        );
        Ok(Keys {
            jwks_uri,
            http,
            by_kid: RwLock::new(by_kid),
            refreshed: tokio::sync::Mutex::new(None),
        })
    }

    /// The key `kid`, fetching the keys again if it is unknown (see [`Keys::refresh_for`]).
    pub(crate) async fn get(&self, kid: &str) -> Option<DecodingKey> {
        if let Some(key) = self.known(kid) {
            return Some(key);
        }
        self.refresh_for(kid).await;
        self.known(kid)
    }

    fn known(&self, kid: &str) -> Option<DecodingKey> {
        self.by_kid
            .read()
            .expect("the key map is never left poisoned")
            .get(kid)
            .cloned()
    }

    /// Fetches the keys again for an unknown `kid`, unless that was done less than
    /// [`REFRESH_EVERY`] ago (or another request already brought the key in).
    async fn refresh_for(&self, kid: &str) {
        let mut refreshed = self.refreshed.lock().await;
        if self.known(kid).is_some() || refreshed.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return;
        }
        *refreshed = Some(Instant::now());
        match get_json(&self.http, self.jwks_uri.as_str()).await {
            Ok(jwks) => {
                let keys = signing_keys(&jwks);
                if keys.is_empty() {
                    // An issuer never signs with no key: an empty set is a fault (a proxy's
                    // page, a half-written file), and the keys in hand stay.
                    tracing::warn!(
                        kid,
                        "the OIDC signing keys fetched again hold no usable key: keeping the previous ones"
                    );
                    return;
                }
                tracing::info!(kid, keys = keys.len(), "OIDC signing keys fetched again");
                *self
                    .by_kid
                    .write()
                    .expect("the key map is never left poisoned") = keys;
            }
            Err(e) => tracing::warn!(
                kid,
                error = %e,
                "cannot fetch the OIDC signing keys: keeping the previous ones"
            ),
        }
    }
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, DiscoveryError> {
    let fail = |message: String| DiscoveryError::Fetch {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_rsa_signing_keys_with_a_kid_are_kept() {
        // An RSA public key's modulus (base64url) and exponent 65537.
        let n = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";
        let rsa = |kid: Option<&str>, use_: &str| {
            let mut key = json!({"kty": "RSA", "use": use_, "n": n, "e": "AQAB"});
            if let Some(kid) = kid {
                key["kid"] = json!(kid);
            }
            key
        };
        let jwks = json!({"keys": [
            rsa(Some("sig-key"), "sig"),
            rsa(Some("enc-key"), "enc"),
            rsa(None, "sig"),
            {"kty": "EC", "kid": "ec-key", "crv": "P-256",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "RSA", "kid": "broken"},
        ]});
        let keys = signing_keys(&jwks);
        assert_eq!(keys.keys().collect::<Vec<_>>(), ["sig-key"]);
    }
}

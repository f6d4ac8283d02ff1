//! The issuer's signing keys: RSA 2048 key pairs, the JWKS that publishes them, RS256
//! signing of tokens, and rotation (the new key signs; the one before it stays published
//! until the next rotation, so tokens it signed still verify). Also the random values the
//! issuer hands out (ids, codes).
//!
//! Keys are generated with aws-lc-rs (`rsa::KeyPair::generate`): rcgen on the workspace's
//! ring backend cannot generate RSA keys, and aws-lc-rs is already built for jsonwebtoken
//! and rustls. Tokens are signed with the key pair directly, because jsonwebtoken wants a
//! PKCS#1 DER private key that aws-lc-rs does not export.

use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::rand::{SecureRandom as _, SystemRandom};
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Value, json};

/// Key generation or signing failed (aws-lc-rs gives no detail).
#[derive(Debug, thiserror::Error)]
#[error("RSA key operation failed")]
pub struct KeyError;

/// One RSA signing key and its `kid`.
struct SigningKey {
    kid: String,
    pair: KeyPair,
}

impl SigningKey {
    fn generate() -> Result<SigningKey, KeyError> {
        let pair = KeyPair::generate(KeySize::Rsa2048).map_err(|_| KeyError)?;
        // Entra's kids are certificate thumbprints; here: the modulus's SHA-256, shortened.
        let hash = digest(
            &SHA256,
            pair.public_key()
                .modulus()
                .big_endian_without_leading_zero(),
        );
        Ok(SigningKey {
            kid: B64.encode(&hash.as_ref()[..20]),
            pair,
        })
    }

    fn jwk(&self) -> Value {
        let public = self.pair.public_key();
        json!({
            "kty": "RSA",
            "use": "sig",
            "alg": "RS256",
            "kid": self.kid,
            "n": B64.encode(public.modulus().big_endian_without_leading_zero()),
            "e": B64.encode(public.exponent().big_endian_without_leading_zero()),
        })
    }
}

/// The published keys: the one that signs, and the one it replaced.
pub struct KeySet {
    current: SigningKey,
    previous: Option<SigningKey>,
}

impl KeySet {
    /// A key set with one new key.
    pub fn generate() -> Result<KeySet, KeyError> {
        Ok(KeySet {
            current: SigningKey::generate()?,
            previous: None,
        })
    }

    /// Signs with a new key; the current one stays published, the one before it is dropped.
    /// Returns the new `kid`.
    pub fn rotate(&mut self) -> Result<String, KeyError> {
        let next = SigningKey::generate()?;
        let kid = next.kid.clone();
        self.previous = Some(std::mem::replace(&mut self.current, next));
        Ok(kid)
    }

    /// The `kid` that signs now.
    #[cfg(test)]
    fn current_kid(&self) -> &str {
        &self.current.kid
    }

    /// The JWKS document (`{"keys": [...]}`), the signing key first.
    pub fn jwks(&self) -> Value {
        let keys: Vec<Value> = std::iter::once(&self.current)
            .chain(self.previous.as_ref())
            .map(SigningKey::jwk)
            .collect();
        json!({ "keys": keys })
    }

    /// `claims` as a compact JWT signed RS256 with the current key.
    pub fn sign(&self, claims: &Value) -> Result<String, KeyError> {
        let header = json!({"typ": "JWT", "alg": "RS256", "kid": self.current.kid});
        let signing_input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        );
        let mut signature = vec![0; self.current.pair.public_modulus_len()];
        self.current
            .pair
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| KeyError)?;
        Ok(format!("{signing_input}.{}", B64.encode(signature)))
    }
}

/// `n` random bytes.
fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source works");
    bytes
}

/// A random version-4 GUID, as Entra's object and tenant ids are written.
pub fn new_guid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A random opaque value (authorization codes, refresh tokens, secrets): 32 bytes, base64url.
pub fn new_opaque() -> String {
    B64.encode(random_bytes::<32>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_key_stays_published_until_the_next_rotation() {
        let mut keys = KeySet::generate().unwrap();
        let first = keys.current_kid().to_owned();
        let second = keys.rotate().unwrap();
        let kids = |keys: &KeySet| -> Vec<String> {
            keys.jwks()["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k["kid"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(kids(&keys), [second.clone(), first.clone()]);
        let third = keys.rotate().unwrap();
        assert_eq!(kids(&keys), [third, second]);
    }

    #[test]
    fn guids_have_the_version_4_shape() {
        let guid = new_guid();
        assert_eq!(guid.len(), 36);
        assert_eq!(&guid[14..15], "4");
        assert_ne!(guid, new_guid());
    }
}

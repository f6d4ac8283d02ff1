//! Shared access signatures (SAS) as IoT Hub and Event Hubs check them.
//!
//! Token: `SharedAccessSignature sr={urlenc(resourceUri)}&sig={urlenc(signature)}&se={expiry}`
//! (`&skn={policy}` for a shared access policy). The string signed is the `sr` value exactly as
//! sent, a newline and the expiry; the signature is base64(HMAC-SHA256(key, that string)).
//! IoT Hub device keys are base64-decoded before use; Event Hubs policy keys are used as their
//! UTF-8 bytes. This module parses, checks and makes tokens; it owns no keys.

use azure_text::uri::URI_COMPONENT;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use percent_encoding::{percent_decode_str, utf8_percent_encode};
use rand::RngCore as _;
use sha2::Sha256;

/// Percent-encodes `text` like JavaScript's `encodeURIComponent` (the set is shared with the
/// clients; the encoding and every check here are the stand-in's own).
fn url_encode(text: &str) -> String {
    utf8_percent_encode(text, URI_COMPONENT).to_string()
}

/// Why a token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SasError {
    /// The text is not a `SharedAccessSignature` token.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// The expiry has passed.
    #[error("token expired at {0}")]
    Expired(u64),
    /// The signature does not match the key.
    #[error("signature does not match")]
    BadSignature,
}

/// A parsed token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SasToken {
    /// The resource URI, decoded.
    pub resource: String,
    /// The `sr` value as sent (what was signed).
    raw_resource: String,
    /// The signature, decoded (base64 text).
    signature: String,
    /// Expiry, seconds since the Unix epoch.
    pub expiry: u64,
    /// The policy name (`skn`), if any.
    pub key_name: Option<String>,
}

fn decode(value: &str) -> Result<String, SasError> {
    percent_decode_str(value)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| SasError::Malformed("a field is not UTF-8 once decoded"))
}

impl SasToken {
    /// Parses `SharedAccessSignature sr=...&sig=...&se=...[&skn=...]`.
    pub fn parse(text: &str) -> Result<SasToken, SasError> {
        let fields = text
            .trim()
            .strip_prefix("SharedAccessSignature ")
            .ok_or(SasError::Malformed("no `SharedAccessSignature ` prefix"))?;
        let (mut sr, mut sig, mut se, mut skn) = (None, None, None, None);
        for part in fields.split('&') {
            let (name, value) = part
                .split_once('=')
                .ok_or(SasError::Malformed("a field is not name=value"))?;
            match name {
                "sr" => sr = Some(value),
                "sig" => sig = Some(decode(value)?),
                "se" => {
                    se = Some(
                        value
                            .parse::<u64>()
                            .map_err(|_| SasError::Malformed("`se` is not a number"))?,
                    )
                }
                "skn" => skn = Some(decode(value)?),
                _ => {}
            }
        }
        let raw_resource = sr.ok_or(SasError::Malformed("no `sr`"))?.to_owned();
        Ok(SasToken {
            resource: decode(&raw_resource)?,
            raw_resource,
            signature: sig.ok_or(SasError::Malformed("no `sig`"))?,
            expiry: se.ok_or(SasError::Malformed("no `se`"))?,
            key_name: skn,
        })
    }

    /// Checks expiry (against `now`, seconds since the epoch) and the signature made with
    /// one of `keys` (raw key bytes). The caller checks the resource.
    pub fn verify(&self, keys: &[&[u8]], now: u64) -> Result<(), SasError> {
        if self.expiry <= now {
            return Err(SasError::Expired(self.expiry));
        }
        let to_sign = format!("{}\n{}", self.raw_resource, self.expiry);
        let given = BASE64
            .decode(&self.signature)
            .map_err(|_| SasError::Malformed("`sig` is not base64"))?;
        for key in keys {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(to_sign.as_bytes());
            if mac.verify_slice(&given).is_ok() {
                return Ok(());
            }
        }
        Err(SasError::BadSignature)
    }
}

/// Normalises a resource URI for comparison: no scheme, no trailing slash, lower case.
pub fn normalise_resource(uri: &str) -> String {
    let without_scheme = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    without_scheme.trim_end_matches('/').to_ascii_lowercase()
}

/// Makes a token for `resource` signed with `key` (raw bytes), valid until `expiry`.
pub fn make_token(resource: &str, key: &[u8], expiry: u64, key_name: Option<&str>) -> String {
    let sr = url_encode(resource);
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(format!("{sr}\n{expiry}").as_bytes());
    let sig = url_encode(&BASE64.encode(mac.finalize().into_bytes()));
    let mut token = format!("SharedAccessSignature sr={sr}&sig={sig}&se={expiry}");
    if let Some(name) = key_name {
        token.push_str("&skn=");
        token.push_str(&url_encode(name));
    }
    token
}

/// Seconds since the Unix epoch now.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A new random 32-byte key, base64.
pub fn new_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    BASE64.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_token_verifies_and_a_changed_one_does_not() {
        let key = b"0123456789abcdef";
        let token = make_token("hub.local/devices/d1", key, 2_000, None);
        let parsed = SasToken::parse(&token).unwrap();
        assert_eq!(parsed.resource, "hub.local/devices/d1");
        assert_eq!(parsed.verify(&[key], 1_000), Ok(()));
        assert_eq!(
            parsed.verify(&[b"other"], 1_000),
            Err(SasError::BadSignature)
        );
        assert_eq!(parsed.verify(&[key], 2_000), Err(SasError::Expired(2_000)));
        let later = token.replace("se=2000", "se=3000");
        let parsed = SasToken::parse(&later).unwrap();
        assert_eq!(parsed.verify(&[key], 1_000), Err(SasError::BadSignature));
    }

    #[test]
    fn policy_name_and_encoding_are_read() {
        let token = make_token("sb://h:5672/hub", b"k", 10, Some("service"));
        let parsed = SasToken::parse(&token).unwrap();
        assert_eq!(parsed.key_name.as_deref(), Some("service"));
        assert_eq!(normalise_resource(&parsed.resource), "h:5672/hub");
        assert!(matches!(
            SasToken::parse("sr=a&sig=b&se=1"),
            Err(SasError::Malformed(_))
        ));
    }
}

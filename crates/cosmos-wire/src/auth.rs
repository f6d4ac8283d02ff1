//! Master-key authorization: the string to sign, the signature, the `Authorization` header, and
//! the resource type and link that a request path stands for.
//!
//! Both sides use the same code: the client to sign, the local endpoint to check.

use azure_text::uri::encode_component;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use percent_encoding::percent_decode_str;
use sha2::Sha256;
use std::fmt;

/// The well-known key of the official local emulator (public; for local use only).
pub const EMULATOR_KEY: &str =
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==";

/// Errors of the authorization helpers.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// The account key is not valid base64.
    #[error(
        "the account key is not valid base64 (copy the primary or secondary key of the account)"
    )]
    KeyNotBase64,
    /// The `Authorization` header is not of the form `type=...&ver=...&sig=...`.
    #[error("malformed authorization header: {0}")]
    MalformedHeader(&'static str),
}

/// A decoded account master key. Its `Debug` output never shows the key.
#[derive(Clone)]
pub struct MasterKey {
    bytes: Vec<u8>,
}

impl MasterKey {
    /// Decodes a base64 account key.
    pub fn from_base64(key: &str) -> Result<Self, AuthError> {
        let bytes = BASE64
            .decode(key.trim())
            .map_err(|_| AuthError::KeyNotBase64)?;
        Ok(Self { bytes })
    }

    /// Signs a request: `base64(HMAC-SHA256(key, string_to_sign))`.
    pub fn sign(&self, verb: &str, resource_type: &str, resource_link: &str, date: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.bytes).expect("HMAC accepts keys of any length");
        mac.update(string_to_sign(verb, resource_type, resource_link, date).as_bytes());
        BASE64.encode(mac.finalize().into_bytes())
    }

    /// Whether `signature` (base64, as in the `Authorization` header) is this key's signature
    /// of the request. The comparison takes the same time wherever the first wrong byte is
    /// (the HMAC crate's constant-time check), so a caller cannot find a signature byte by byte.
    pub fn verifies(
        &self,
        signature: &str,
        verb: &str,
        resource_type: &str,
        resource_link: &str,
        date: &str,
    ) -> bool {
        let Ok(given) = BASE64.decode(signature.trim()) else {
            return false;
        };
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.bytes).expect("HMAC accepts keys of any length");
        mac.update(string_to_sign(verb, resource_type, resource_link, date).as_bytes());
        mac.verify_slice(&given).is_ok()
    }

    /// The URL-encoded `Authorization` header value for a request.
    pub fn authorization(
        &self,
        verb: &str,
        resource_type: &str,
        resource_link: &str,
        date: &str,
    ) -> String {
        let sig = self.sign(verb, resource_type, resource_link, date);
        encode_component(&format!("type=master&ver=1.0&sig={sig}"))
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

/// The string the service signs: verb and date lowercase, resource link as it is.
pub fn string_to_sign(verb: &str, resource_type: &str, resource_link: &str, date: &str) -> String {
    format!(
        "{}\n{}\n{}\n{}\n\n",
        verb.to_ascii_lowercase(),
        resource_type,
        resource_link,
        date.to_ascii_lowercase()
    )
}

/// The `Authorization` header for an Entra ID access token (scope `https://cosmos.azure.com/.default`).
pub fn aad_authorization(token: &str) -> String {
    encode_component(&format!("type=aad&ver=1.0&sig={token}"))
}

/// A parsed `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationHeader {
    /// `master`, `resource` or `aad`.
    pub kind: String,
    /// Always `1.0` today.
    pub version: String,
    /// The signature (or token).
    pub signature: String,
}

impl AuthorizationHeader {
    /// Parses a URL-encoded (or plain) `type=..&ver=..&sig=..` header value.
    pub fn parse(value: &str) -> Result<Self, AuthError> {
        let decoded =
            url_decode(value).ok_or(AuthError::MalformedHeader("bad percent-encoding"))?;
        let (mut kind, mut version, mut signature) = (None, None, None);
        // The signature itself is base64 and may contain '=', so split on '&' and the first '='.
        for part in decoded.split('&') {
            let (k, v) = part
                .split_once('=')
                .ok_or(AuthError::MalformedHeader("a part has no '='"))?;
            match k {
                "type" => kind = Some(v.to_string()),
                "ver" => version = Some(v.to_string()),
                "sig" => signature = Some(v.to_string()),
                _ => {}
            }
        }
        Ok(Self {
            kind: kind.ok_or(AuthError::MalformedHeader("no type"))?,
            version: version.ok_or(AuthError::MalformedHeader("no ver"))?,
            signature: signature.ok_or(AuthError::MalformedHeader("no sig"))?,
        })
    }
}

/// The resource type and resource link that a request path is signed with.
///
/// The path is split into segments (percent-decoded): an odd count ends in a feed (`/dbs`,
/// `/dbs/d/colls/c/docs`): the type is the last segment and the link the ones before it; an even
/// count names a resource (`/dbs/d/colls/c/docs/id`): the type is the second to last segment and
/// the link the whole path. The account root `/` has an empty type and link.
pub fn resource_for_path(path: &str) -> (String, String) {
    let segments: Vec<String> = path
        .split('?')
        .next()
        .unwrap_or("")
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| url_decode(s).unwrap_or_else(|| s.to_string()))
        .collect();
    match segments.len() {
        0 => (String::new(), String::new()),
        n if n % 2 == 1 => (segments[n - 1].clone(), segments[..n - 1].join("/")),
        n => (segments[n - 2].clone(), segments.join("/")),
    }
}

/// Decodes percent-encoding; `None` if the result is not UTF-8.
pub fn url_decode(s: &str) -> Option<String> {
    percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|decoded| decoded.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const VECTOR_KEY: &str =
        "dsZQi3KtZmCv1ljt3VNWNm7sQUF1y5rJfC6kv5JiwvW0EndXdDku/dkKBp8/ufDToSxLzR4y+O/0H/t4bQtVNw==";

    #[test]
    fn published_signature_vector() {
        let key = MasterKey::from_base64(VECTOR_KEY).unwrap();
        let date = "Thu, 27 Apr 2017 00:51:12 GMT";
        assert_eq!(
            key.sign("GET", "dbs", "dbs/ToDoList", date),
            "c09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu+c+c="
        );
        assert_eq!(
            key.authorization("GET", "dbs", "dbs/ToDoList", date),
            "type%3Dmaster%26ver%3D1.0%26sig%3Dc09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu%2Bc%2Bc%3D"
        );
    }

    #[test]
    fn verifies_its_own_signature_and_nothing_else() {
        let key = MasterKey::from_base64(VECTOR_KEY).unwrap();
        let date = "Thu, 27 Apr 2017 00:51:12 GMT";
        let good = "c09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu+c+c=";
        assert!(key.verifies(good, "GET", "dbs", "dbs/ToDoList", date));
        assert!(!key.verifies(good, "PUT", "dbs", "dbs/ToDoList", date));
        assert!(!key.verifies(
            good,
            "GET",
            "dbs",
            "dbs/ToDoList",
            "Fri, 28 Apr 2017 00:51:12 GMT"
        ));
        let last_byte_off = "c09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu+c+d=";
        assert!(!key.verifies(last_byte_off, "GET", "dbs", "dbs/ToDoList", date));
        assert!(!key.verifies("not base64!", "GET", "dbs", "dbs/ToDoList", date));
        assert!(!key.verifies("", "GET", "dbs", "dbs/ToDoList", date));
    }

    #[test]
    fn header_parses_back() {
        let parsed = AuthorizationHeader::parse(
            "type%3Dmaster%26ver%3D1.0%26sig%3Dc09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu%2Bc%2Bc%3D",
        )
        .unwrap();
        assert_eq!(parsed.kind, "master");
        assert_eq!(parsed.version, "1.0");
        assert_eq!(
            parsed.signature,
            "c09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu+c+c="
        );
        assert!(AuthorizationHeader::parse("type%3Dmaster").is_err());
    }

    #[test]
    fn key_is_redacted_and_validated() {
        let key = MasterKey::from_base64(EMULATOR_KEY).unwrap();
        assert_eq!(format!("{key:?}"), "MasterKey(<redacted>)");
        assert_eq!(
            MasterKey::from_base64("not base64!").unwrap_err(),
            AuthError::KeyNotBase64
        );
    }

    #[test]
    fn resource_type_and_link_from_paths() {
        let cases = [
            ("/", ("", "")),
            ("/dbs", ("dbs", "")),
            ("/dbs/ToDoList", ("dbs", "dbs/ToDoList")),
            ("/dbs/db/colls", ("colls", "dbs/db")),
            ("/dbs/db/colls/c", ("colls", "dbs/db/colls/c")),
            ("/dbs/db/colls/c/docs", ("docs", "dbs/db/colls/c")),
            (
                "/dbs/db/colls/c/docs/drone%3A7",
                ("docs", "dbs/db/colls/c/docs/drone:7"),
            ),
            ("/dbs/db/colls/c/pkranges", ("pkranges", "dbs/db/colls/c")),
            ("/dbs/db/colls/c/docs?x=1", ("docs", "dbs/db/colls/c")),
        ];
        for (path, (ty, link)) in cases {
            assert_eq!(
                resource_for_path(path),
                (ty.to_string(), link.to_string()),
                "{path}"
            );
        }
    }

    proptest! {
        #[test]
        fn url_encoding_round_trips(s in ".*") {
            prop_assert_eq!(url_decode(&encode_component(&s)), Some(s));
        }

        #[test]
        fn url_decode_never_panics(s in ".*") {
            let _ = url_decode(&s);
        }
    }
}

//! Shared Key authorization of Blob Storage requests (learn.microsoft.com/rest/api/storageservices
//! "Authorize with Shared Key"): the string to sign of a request and its
//! `Authorization: SharedKey {account}:{signature}` header.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use reqwest::Method;
use reqwest::header::HeaderMap;
use sha2::Sha256;
use url::Url;

/// The standard headers of the string to sign, in its order.
const SIGNED_HEADERS: [&str; 11] = [
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
];

/// The account key is not base64.
#[derive(Debug, thiserror::Error)]
#[error("the storage account key is not base64: {0}")]
pub struct KeyError(#[from] base64::DecodeError);

/// An account name and its key.
pub struct SharedKey {
    account: String,
    key: Vec<u8>,
}

impl std::fmt::Debug for SharedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedKey")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl SharedKey {
    /// The key of `account`, given in base64 as the portal and connection strings show it.
    pub fn new(account: &str, key_base64: &str) -> Result<Self, KeyError> {
        Ok(SharedKey {
            account: account.to_owned(),
            key: STANDARD.decode(key_base64.trim())?,
        })
    }

    /// The `Authorization` header value of a request with these method, URL and headers
    /// (`x-ms-date` among them).
    pub fn authorization(&self, method: &Method, url: &Url, headers: &HeaderMap) -> String {
        let to_sign = self.string_to_sign(method, url, headers);
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(to_sign.as_bytes());
        let signature = STANDARD.encode(mac.finalize().into_bytes());
        format!("SharedKey {}:{signature}", self.account)
    }

    /// The string to sign (version 2009-09-19 and later): the verb, the standard headers
    /// (`Content-Length` empty when zero), the `x-ms-` headers sorted, and the resource.
    pub fn string_to_sign(&self, method: &Method, url: &Url, headers: &HeaderMap) -> String {
        let mut out = format!("{}\n", method.as_str());
        for name in SIGNED_HEADERS {
            let value = header(headers, name);
            let value = if name == "content-length" && value == "0" {
                ""
            } else {
                value
            };
            out.push_str(value);
            out.push('\n');
        }
        let mut ms: Vec<(String, &str)> = headers
            .iter()
            .filter(|(name, _)| name.as_str().starts_with("x-ms-"))
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    value.to_str().unwrap_or("").trim(),
                )
            })
            .collect();
        ms.sort();
        for (name, value) in ms {
            out.push_str(&format!("{name}:{value}\n"));
        }
        out.push_str(&format!("/{}{}", self.account, url.path()));
        let mut params: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| (name.to_lowercase(), value.into_owned()))
            .collect();
        params.sort();
        let mut names: Vec<&str> = params.iter().map(|(name, _)| name.as_str()).collect();
        names.dedup();
        for name in names {
            let values: Vec<&str> = params
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect();
            out.push_str(&format!("\n{name}:{}", values.join(",")));
        }
        out
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

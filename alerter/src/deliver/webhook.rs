//! A webhook: one CloudEvent per `POST`, in structured mode
//! (`Content-Type: application/cloudevents+json; charset=utf-8`), signed with HMAC-SHA256
//! over the body with the shared secret (`ALERT_WEBHOOK_SECRET`), sent as
//! `X-Alert-Signature-256: sha256={hex}` (GitHub's scheme: the receiver computes the same
//! HMAC over the bytes it received and compares in constant time).

use hmac::{Hmac, Mac};
use reqwest::RequestBuilder;
use settings::Secret;
use sha2::Sha256;
use url::Url;

/// The header that carries the body's signature.
pub const SIGNATURE_HEADER: &str = "X-Alert-Signature-256";

/// The CloudEvents structured-mode media type.
const STRUCTURED: &str = "application/cloudevents+json; charset=utf-8";

/// A webhook and its signing secret.
#[derive(Debug)]
pub struct Webhook {
    /// Where events are posted.
    pub url: Url,
    /// The HMAC key; none: unsigned.
    pub secret: Option<Secret>,
}

/// The signature header's value for `body` under `secret`: `sha256=` and the hex HMAC.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

impl Webhook {
    /// The request that posts `body`.
    pub(super) fn request(&self, http: &reqwest::Client, body: Vec<u8>) -> RequestBuilder {
        let mut request = http
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, STRUCTURED);
        if let Some(secret) = &self.secret {
            request = request.header(
                SIGNATURE_HEADER,
                signature(secret.expose().as_bytes(), &body),
            );
        }
        request.body(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_body() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}

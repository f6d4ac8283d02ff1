//! The HTTP client `azure_identity` sends its token requests through: the workspace's
//! reqwest, which trusts the public roots and the system's store (`SSL_CERT_FILE`,
//! `SSL_CERT_DIR`: the CA of a private or local issuer). `azure_identity`'s own transport
//! is reqwest 0.13, a second HTTP stack in the build for a few requests an hour.

use std::sync::Arc;
use std::time::Duration;

use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::request::{Body, Request};
use azure_core::http::{AsyncRawResponse, HttpClient, StatusCode};
use azure_core::{Error, error::ErrorKind};

/// Longest wait for a token endpoint's answer.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The client.
pub(crate) fn http_client() -> Result<Arc<dyn HttpClient>, reqwest::Error> {
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    Ok(Arc::new(Reqwest(client)))
}

#[derive(Debug)]
struct Reqwest(reqwest::Client);

#[async_trait::async_trait]
impl HttpClient for Reqwest {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes())
            .map_err(|e| Error::with_error(ErrorKind::Other, e, "an HTTP method reqwest lacks"))?;
        let mut outgoing = self.0.request(method, request.url().as_str());
        for (name, value) in request.headers().iter() {
            outgoing = outgoing.header(name.as_str(), value.as_str());
        }
        let outgoing = match request.body() {
            Body::Bytes(bytes) => outgoing.body(bytes.clone()),
            Body::SeekableStream(_) => {
                return Err(Error::with_message(
                    ErrorKind::Other,
                    "token requests have no streamed bodies",
                ));
            }
        };
        let response = outgoing.send().await.map_err(|e| {
            let kind = if e.is_connect() {
                ErrorKind::Connection
            } else {
                ErrorKind::Io
            };
            Error::with_error(kind, e, "token request failed")
        })?;
        let status = StatusCode::from(response.status().as_u16());
        let headers: Headers = response
            .headers()
            .iter()
            .filter_map(|(name, value)| {
                Some((
                    HeaderName::from(name.as_str().to_owned()),
                    HeaderValue::from(value.to_str().ok()?.to_owned()),
                ))
            })
            .collect::<std::collections::HashMap<_, _>>()
            .into();
        let body = response
            .bytes()
            .await
            .map_err(|e| Error::with_error(ErrorKind::Io, e, "reading the token response"))?;
        Ok(AsyncRawResponse::from_bytes(status, headers, body))
    }
}

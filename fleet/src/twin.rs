//! A service client for IoT Hub's device twins, over the service REST API
//! (`GET` and `PATCH /twins/{id}`, `api-version` 2021-04-12 as
//! Microsoft's REST reference gives it), authorised with a SAS token signed by a shared access
//! policy's key (`iothubowner`, or any policy with the service connect right). The token is
//! made by `hub_sim::make_token`, the project's one signer that names the policy (`skn`).
//!
//! Every request is bounded in time and every answer in size. What each call costs in IoT
//! Hub messages is in `deploy/prices.toml` (`[iothub.metering]`): a twin read or update is
//! one message per 4 KB.

use std::time::Duration;

use azure_text::connection_string;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use settings::SecretBytes;

/// The service API's version (Microsoft's REST reference, "Devices - Get Twin").
pub const API_VERSION: &str = "2021-04-12";
/// How long a token is valid.
const TOKEN_LIFETIME: Duration = Duration::from_secs(3_600);
/// The bound on connecting to the hub.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The bound on a twin request, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest answer read: a twin's desired and reported documents are 32 KB each, its tags
/// 8 KB; metadata and the method payload's 128 KB fit too.
const MAX_ANSWER_BYTES: usize = 512 * 1024;

/// Why a twin or method call failed.
#[derive(Debug, thiserror::Error)]
pub enum TwinError {
    /// The connection string cannot be used.
    #[error(
        "the service connection string {0} (expected HostName=...;SharedAccessKeyName=...;SharedAccessKey=...)"
    )]
    ConnectionString(String),
    /// The request did not complete (connection, TLS, time bound).
    #[error("{what}: {source}")]
    Request {
        /// The call.
        what: String,
        /// The cause.
        source: reqwest::Error,
    },
    /// The hub answered with an error status (e.g. 404 device not online, 504 no answer in
    /// time, 412 a stale etag).
    #[error("{what}: HTTP {status}: {body}")]
    Status {
        /// The call.
        what: String,
        /// The status.
        status: u16,
        /// The answer's body (cut short).
        body: String,
    },
    /// The answer is not what the API defines.
    #[error("{what}: {reason}")]
    Answer {
        /// The call.
        what: String,
        /// What is wrong.
        reason: String,
    },
}

/// A service client of one hub.
#[derive(Debug, Clone)]
pub struct TwinClient {
    http: reqwest::Client,
    base: String,
    host: String,
    key_name: String,
    key: SecretBytes,
}

impl TwinClient {
    /// A client for the hub of `connection_string`
    /// (`HostName=...;SharedAccessKeyName=...;SharedAccessKey=...`). `base` overrides where
    /// requests go (a local hub's `https://127.0.0.1:{port}`; by default
    /// `https://{HostName}`); `ca_pem` is a root to trust besides the system's.
    pub fn new(
        connection_string: &str,
        base: Option<&str>,
        ca_pem: Option<&str>,
    ) -> Result<TwinClient, TwinError> {
        let bad = |what: &str| TwinError::ConnectionString(what.to_owned());
        let (mut host, mut key_name, mut key) = (None, None, None);
        for part in connection_string::parts(connection_string) {
            let (name, value) = part.map_err(|p| {
                TwinError::ConnectionString(format!("has part {} without `=`", p.index))
            })?;
            match name {
                "HostName" => host = Some(value.to_owned()),
                "SharedAccessKeyName" => key_name = Some(value.to_owned()),
                "SharedAccessKey" => {
                    key = Some(
                        BASE64
                            .decode(value)
                            .map_err(|_| bad("has a key that is not base64"))?,
                    )
                }
                _ => {}
            }
        }
        let host = host.ok_or_else(|| bad("has no HostName"))?;
        let key_name = key_name.ok_or_else(|| bad("has no SharedAccessKeyName"))?;
        let key = SecretBytes::new(key.ok_or_else(|| bad("has no SharedAccessKey"))?);
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT);
        if let Some(pem) = ca_pem {
            let ca = reqwest::Certificate::from_pem(pem.as_bytes()).map_err(|source| {
                TwinError::Request {
                    what: "the CA certificate".into(),
                    source,
                }
            })?;
            builder = builder.add_root_certificate(ca);
        }
        let http = builder.build().map_err(|source| TwinError::Request {
            what: "the HTTPS client".into(),
            source,
        })?;
        let base = base.map_or_else(
            || format!("https://{host}"),
            |b| b.trim_end_matches('/').to_owned(),
        );
        Ok(TwinClient {
            http,
            base,
            host,
            key_name,
            key,
        })
    }

    /// The device's twin (`GET /twins/{id}`): `properties.desired`, `properties.reported`,
    /// each with its `$version`.
    pub async fn twin(&self, device_id: &str) -> Result<Value, TwinError> {
        let what = format!("reading the twin of {device_id}");
        let request = self.http.get(self.url(device_id, ""));
        self.send(request, &what, REQUEST_TIMEOUT).await
    }

    /// Patches the device's desired properties with `desired` whatever the twin's etag
    /// (`PATCH /twins/{id}`, `If-Match: *`); the twin after the patch.
    pub async fn update_desired(
        &self,
        device_id: &str,
        desired: Value,
    ) -> Result<Value, TwinError> {
        let what = format!("patching the desired properties of {device_id}");
        let request = self
            .http
            .patch(self.url(device_id, ""))
            .header("If-Match", "*")
            .json(&json!({"properties": {"desired": desired}}));
        self.send(request, &what, REQUEST_TIMEOUT).await
    }

    fn url(&self, device_id: &str, tail: &str) -> String {
        format!(
            "{}/twins/{}{tail}?api-version={API_VERSION}",
            self.base,
            azure_text::uri::encode_component(device_id)
        )
    }

    fn token(&self) -> String {
        let expiry = hub_sim::now_secs() + TOKEN_LIFETIME.as_secs();
        hub_sim::make_token(&self.host, self.key.expose(), expiry, Some(&self.key_name))
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
        bound: Duration,
    ) -> Result<Value, TwinError> {
        let failed = |source| TwinError::Request {
            what: what.to_owned(),
            source,
        };
        let mut response = request
            .header("Authorization", self.token())
            .timeout(bound)
            .send()
            .await
            .map_err(failed)?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(TwinError::Answer {
                    what: what.to_owned(),
                    reason: format!("an answer over {MAX_ANSWER_BYTES} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(TwinError::Status {
                what: what.to_owned(),
                status: status.as_u16(),
                body: text.chars().take(300).collect(),
            });
        }
        serde_json::from_slice(&body).map_err(|e| TwinError::Answer {
            what: what.to_owned(),
            reason: format!("not JSON: {e}"),
        })
    }
}

/// A writable property's acknowledgement in reported properties (IoT Plug and Play:
/// `{"value", "ac", "av", "ad"}`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Ack {
    /// The value in effect.
    pub value: Value,
    /// The HTTP-like status (200 applied).
    pub ac: u16,
    /// The desired `$version` acknowledged.
    pub av: u64,
    /// A description.
    #[serde(default)]
    pub ad: String,
}

/// The acknowledgement of writable property `name` in `twin`'s reported properties, if any.
pub fn ack(twin: &Value, name: &str) -> Option<Ack> {
    serde_json::from_value(
        twin.pointer(&format!("/properties/reported/{name}"))?
            .clone(),
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CS: &str = "HostName=hub.azure-devices.net;SharedAccessKeyName=iothubowner;SharedAccessKey=c2VjcmV0S2V5";

    #[test]
    fn requests_name_the_api_version_and_an_encoded_device_id() {
        let client = TwinClient::new(CS, None, None).unwrap();
        assert_eq!(
            client.url("drone 1", "/methods"),
            "https://hub.azure-devices.net/twins/drone%201/methods?api-version=2021-04-12"
        );
        let local = TwinClient::new(CS, Some("https://127.0.0.1:8443/"), None).unwrap();
        assert_eq!(
            local.url("d", ""),
            "https://127.0.0.1:8443/twins/d?api-version=2021-04-12"
        );
    }

    #[test]
    fn the_token_is_for_the_hub_and_names_the_policy() {
        // "Control access to IoT Hub using SAS": a service token's resource is the hub's
        // host name and `skn` names the shared access policy.
        let client = TwinClient::new(CS, None, None).unwrap();
        let token = client.token();
        assert!(
            token.starts_with("SharedAccessSignature sr=hub.azure-devices.net&sig="),
            "{token}"
        );
        assert!(token.ends_with("&skn=iothubowner"), "{token}");
        let parsed = hub_sim::SasToken::parse(&token).unwrap();
        parsed.verify(&[b"secretKey"], hub_sim::now_secs()).unwrap();
    }

    #[test]
    fn a_connection_string_without_a_policy_is_refused_saying_what_to_write() {
        for (text, says) in [
            (
                "HostName=h;SharedAccessKey=c2VjcmV0S2V5",
                "no SharedAccessKeyName",
            ),
            ("HostName=h;SharedAccessKeyName=p", "no SharedAccessKey"),
            (
                "SharedAccessKeyName=p;SharedAccessKey=c2VjcmV0S2V5",
                "no HostName",
            ),
            (
                "HostName=h;SharedAccessKeyName=p;SharedAccessKey=%%%",
                "not base64",
            ),
        ] {
            let err = TwinClient::new(text, None, None).unwrap_err().to_string();
            assert!(
                err.contains(says) && err.contains("expected HostName="),
                "{err}"
            );
        }
    }

    #[test]
    fn an_acknowledgement_is_read_from_reported_properties() {
        let twin = json!({"properties": {"reported": {
            "reportInterval": {"value": 1, "ac": 200, "av": 7, "ad": "applied"},
            "agentVersion": "0.1.0"
        }}});
        assert_eq!(
            ack(&twin, "reportInterval"),
            Some(Ack {
                value: json!(1),
                ac: 200,
                av: 7,
                ad: "applied".into()
            })
        );
        assert_eq!(ack(&twin, "publishEvery"), None);
        assert_eq!(ack(&twin, "agentVersion"), None);
    }
}

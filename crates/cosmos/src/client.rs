//! The account client: configuration, the shared HTTP connection pool, signing and sending
//! requests, reading the response headers every caller needs, and the retry loop of point
//! operations.
//!
//! The client talks to the configured endpoint only: it never reads the account's advertised
//! locations (which emulators set to addresses that do not answer).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cosmos_wire::auth::{MasterKey, resource_for_path, url_encode};
use cosmos_wire::headers;
use cosmos_wire::resources::ErrorBody;
use cosmos_wire::status::{Disposition, disposition};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use url::Url;

use crate::container::ContainerClient;
use crate::retry::RetryPolicy;
use crate::{CosmosError, Credential, ServiceError};

/// Settings of a [`CosmosClient`].
#[derive(Debug, Clone)]
pub struct CosmosConfig {
    /// The account endpoint, e.g. `https://myaccount.documents.azure.com:443/`.
    pub endpoint: Url,
    /// Master key or token credential.
    pub credential: Credential,
    /// Accept self-signed certificates: for local emulators only.
    pub accept_invalid_certs: bool,
    /// Time limit of one HTTP request, from sending to the end of the response body.
    pub request_timeout: Duration,
    /// Idle connections kept per host (size it for the bulk writer's total concurrency).
    pub max_idle_connections: usize,
    /// Retries of point operations, queries and metadata requests.
    pub retry: RetryPolicy,
}

impl CosmosConfig {
    /// Settings with defaults: certificates checked, 10 s request timeout, 256 pooled
    /// connections, the default [`RetryPolicy`].
    pub fn new(endpoint: Url, credential: Credential) -> Self {
        Self {
            endpoint,
            credential,
            accept_invalid_certs: false,
            request_timeout: Duration::from_secs(10),
            max_idle_connections: 256,
            retry: RetryPolicy::default(),
        }
    }
}

/// A Cosmos DB account client. Cheap to clone: clones share one connection pool.
#[derive(Debug, Clone)]
pub struct CosmosClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    /// The endpoint without its trailing slash; request paths start with `/`.
    base: String,
    config: CosmosConfig,
    signatures: Mutex<Signatures>,
}

/// The date header of the current second and the master-key signatures made in it. The
/// signature covers the verb, resource type, resource link and date only, so the many
/// requests a bulk writer sends per second to one container share one signature.
#[derive(Default)]
struct Signatures {
    /// The master key requests are signed with (`None` with a token credential); it can be
    /// replaced while the client runs ([`CosmosClient::set_master_key`]).
    key: Option<MasterKey>,
    /// Seconds since the Unix epoch that `date` spells.
    second: u64,
    date: String,
    /// `(verb, resource type, resource link, authorization)` of this second.
    signed: Vec<(Method, String, String, String)>,
}

/// Signatures kept per second: a client talks to a few containers at once.
const SIGNATURES_PER_SECOND: usize = 16;

impl fmt::Debug for Signatures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signatures")
            .field("date", &self.date)
            .finish_non_exhaustive()
    }
}

/// What the client needs to send one request.
#[derive(Debug, Clone)]
pub(crate) struct RequestSpec {
    pub method: Method,
    /// The URL path, with names already percent-encoded (see [`path_segment`]).
    pub path: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Option<Bytes>,
    /// Whether a timeout or broken connection may be retried (the request may have been applied).
    pub idempotent: bool,
    /// Whether a 410 range move is retried as is; not for requests aimed at a range id, which
    /// must be re-routed instead.
    pub retry_range_gone: bool,
    /// A time limit other than the client's.
    pub timeout: Option<Duration>,
}

impl RequestSpec {
    pub(crate) fn new(method: Method, path: String) -> Self {
        let idempotent = method != Method::POST && method != Method::PATCH;
        Self {
            method,
            path,
            headers: Vec::new(),
            body: None,
            idempotent,
            retry_range_gone: true,
            timeout: None,
        }
    }

    pub(crate) fn header(mut self, name: &'static str, value: &str) -> Result<Self, CosmosError> {
        let value = HeaderValue::from_str(value)
            .map_err(|_| CosmosError::Config(format!("value of header {name} is not valid")))?;
        self.headers.push((HeaderName::from_static(name), value));
        Ok(self)
    }

    pub(crate) fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = Some(body.into());
        self
    }

    pub(crate) fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub(crate) fn retry_range_gone(mut self, retry: bool) -> Self {
        self.retry_range_gone = retry;
        self
    }
}

/// A response whatever its status, with the headers every caller reads.
#[derive(Debug, Clone)]
pub(crate) struct RawResponse {
    pub status: u16,
    pub substatus: u32,
    pub request_charge: f64,
    pub activity_id: Option<String>,
    pub retry_after: Option<Duration>,
    pub etag: Option<String>,
    pub continuation: Option<String>,
    pub body: Bytes,
}

impl RawResponse {
    fn read_headers(status: StatusCode, h: &HeaderMap) -> Self {
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
        Self {
            status: status.as_u16(),
            substatus: text(headers::SUBSTATUS)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            request_charge: text(headers::REQUEST_CHARGE)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0),
            activity_id: text(headers::ACTIVITY_ID).map(str::to_string),
            retry_after: text(headers::RETRY_AFTER_MS)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .map(|ms| Duration::from_micros((ms * 1000.0) as u64)),
            etag: text(headers::ETAG).map(str::to_string),
            continuation: text(headers::CONTINUATION).map(str::to_string),
            body: Bytes::new(),
        }
    }

    /// Whether the status is a success (2xx).
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The response as a [`CosmosError`], for a non-success status.
    pub fn to_error(&self) -> CosmosError {
        let message = match serde_json::from_slice::<ErrorBody>(&self.body) {
            Ok(body) => body.message,
            Err(_) => String::from_utf8_lossy(&self.body[..self.body.len().min(512)]).into_owned(),
        };
        CosmosError::Service(ServiceError {
            status: self.status,
            substatus: self.substatus,
            activity_id: self.activity_id.clone(),
            request_charge: self.request_charge,
            retry_after: self.retry_after,
            message,
        })
    }

    /// `Ok(self)` for a success, else the error.
    pub fn into_result(self) -> Result<Self, CosmosError> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(self.to_error())
        }
    }
}

/// Percent-encodes one name (database, container, document id) for a URL path.
pub(crate) fn path_segment(name: &str) -> String {
    url_encode(name)
}

impl CosmosClient {
    /// Builds a client. Fails if the endpoint is not http(s) or the TLS setup fails.
    pub fn new(config: CosmosConfig) -> Result<Self, CosmosError> {
        if !matches!(config.endpoint.scheme(), "http" | "https") {
            return Err(CosmosError::Config(format!(
                "endpoint {} must be an http:// or https:// URL",
                config.endpoint
            )));
        }
        if config.retry.max_attempts == 0 {
            return Err(CosmosError::Config(
                "retry.max_attempts must be at least 1".to_string(),
            ));
        }
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .danger_accept_invalid_certs(config.accept_invalid_certs)
            .http1_only()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(config.max_idle_connections)
            .pool_idle_timeout(Duration::from_secs(60))
            .connect_timeout(config.request_timeout)
            .build()
            .map_err(CosmosError::Transport)?;
        let base = config.endpoint.as_str().trim_end_matches('/').to_string();
        let key = match &config.credential {
            Credential::MasterKey(key) => Some(key.clone()),
            Credential::Token(_) => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                base,
                config,
                signatures: Mutex::new(Signatures {
                    key,
                    ..Signatures::default()
                }),
            }),
        })
    }

    /// Signs every request from now on with `key` (a rotated account key), for this client
    /// and its clones. A client built with a token credential switches to the key.
    pub fn set_master_key(&self, key: MasterKey) {
        let mut cache = self
            .inner
            .signatures
            .lock()
            .expect("signature lock is never poisoned");
        cache.key = Some(key);
        cache.signed.clear();
    }

    /// The settings this client was built with.
    pub fn config(&self) -> &CosmosConfig {
        &self.inner.config
    }

    /// A client for one container.
    pub fn container(&self, database: &str, container: &str) -> ContainerClient {
        ContainerClient::new(self.clone(), database, container)
    }

    /// Creates the database unless it exists. Returns whether it was created.
    pub async fn create_database_if_missing(&self, database: &str) -> Result<bool, CosmosError> {
        let body = serde_json::to_vec(&serde_json::json!({ "id": database }))
            .expect("a JSON object serializes");
        let spec = RequestSpec::new(Method::POST, "/dbs".to_string())
            .body(body)
            .idempotent(true);
        let response = self.execute(&spec).await?;
        match response.status {
            409 => Ok(false),
            _ => response.into_result().map(|_| true),
        }
    }

    /// Signs and sends one request; any status is returned as a response, only transport
    /// failures and timeouts as errors.
    pub(crate) async fn send(&self, spec: &RequestSpec) -> Result<RawResponse, CosmosError> {
        let inner = &self.inner;
        let (date, auth) = self.sign(spec).await?;
        let timeout = spec.timeout.unwrap_or(inner.config.request_timeout);
        let mut request = inner
            .http
            .request(spec.method.clone(), format!("{}{}", inner.base, spec.path))
            .timeout(timeout)
            .header(headers::DATE, date)
            .header(headers::VERSION, cosmos_wire::API_VERSION)
            .header(reqwest::header::AUTHORIZATION, auth)
            .header(reqwest::header::ACCEPT, "application/json");
        let mut has_content_type = false;
        for (name, value) in &spec.headers {
            has_content_type |= name == reqwest::header::CONTENT_TYPE;
            request = request.header(name.clone(), value.clone());
        }
        if let Some(body) = &spec.body {
            if !has_content_type {
                request = request.header(reqwest::header::CONTENT_TYPE, "application/json");
            }
            request = request.body(body.clone());
        }
        let map_err = |e: reqwest::Error| {
            if e.is_timeout() {
                CosmosError::Timeout(timeout)
            } else {
                CosmosError::Transport(e)
            }
        };
        let response = request.send().await.map_err(map_err)?;
        let mut raw = RawResponse::read_headers(response.status(), response.headers());
        raw.body = response.bytes().await.map_err(map_err)?;
        Ok(raw)
    }

    /// The date header and authorization of a request sent now. Master-key signatures are
    /// reused within the second they were made for.
    async fn sign(&self, spec: &RequestSpec) -> Result<(String, String), CosmosError> {
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let (resource_type, resource_link) = resource_for_path(&spec.path);
        let date = {
            let mut cache = self
                .inner
                .signatures
                .lock()
                .expect("signature lock is never poisoned");
            if cache.second != second || cache.date.is_empty() {
                cache.second = second;
                cache.date = cosmos_wire::http_date(now);
                cache.signed.clear();
            }
            if let Some(key) = &cache.key {
                let hit = cache.signed.iter().find(|(verb, kind, link, _)| {
                    *verb == spec.method && *kind == resource_type && *link == resource_link
                });
                let auth = match hit {
                    Some((_, _, _, auth)) => auth.clone(),
                    None => {
                        let verb = spec.method.as_str();
                        let auth =
                            key.authorization(verb, &resource_type, &resource_link, &cache.date);
                        if cache.signed.len() < SIGNATURES_PER_SECOND {
                            let entry = (spec.method.clone(), resource_type, resource_link);
                            cache.signed.push((entry.0, entry.1, entry.2, auth.clone()));
                        }
                        auth
                    }
                };
                return Ok((cache.date.clone(), auth));
            }
            cache.date.clone()
        };
        let auth = self
            .inner
            .config
            .credential
            .authorization(spec.method.as_str(), &resource_type, &resource_link, &date)
            .await?;
        Ok((date, auth))
    }

    /// Sends a request, retrying throttles and transient failures under the client's
    /// [`RetryPolicy`]. Returns the last response, whatever its status.
    pub(crate) async fn execute(&self, spec: &RequestSpec) -> Result<RawResponse, CosmosError> {
        let policy = &self.inner.config.retry;
        let started = Instant::now();
        let (mut attempts, mut failures) = (0, 0);
        loop {
            attempts += 1;
            let result = self.send(spec).await;
            let (kind, retry_after) = match &result {
                Ok(r) => match disposition(r.status, r.substatus) {
                    Disposition::RangeGone if !spec.retry_range_gone => {
                        (Disposition::Permanent, None)
                    }
                    d => (d, r.retry_after),
                },
                // The request never left: safe to send again whatever it is.
                Err(CosmosError::Transport(e)) if e.is_connect() => (Disposition::Transient, None),
                Err(e) if spec.idempotent => (e.disposition(), None),
                Err(_) => (Disposition::Permanent, None),
            };
            if kind != Disposition::Throttled {
                failures += 1;
            }
            if !policy.allows_retry(kind, failures, started.elapsed()) {
                return result;
            }
            tracing::debug!(
                path = %spec.path,
                attempts,
                status = result.as_ref().map(|r| r.status).ok(),
                "retrying request"
            );
            tokio::time::sleep(policy.delay(failures.max(1), retry_after)).await;
        }
    }
}

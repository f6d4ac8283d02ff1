//! The account client: configuration, the shared HTTP connection pool, signing and sending
//! requests ([`crate::request`] has their shape) with the client's priority level, and the
//! retry loop every request goes through.
//!
//! The client talks to the configured endpoint only: it never reads the account's advertised
//! locations (which emulators set to addresses that do not answer).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cosmos_wire::auth::{MasterKey, resource_for_path};
use cosmos_wire::headers;
use cosmos_wire::status::{Disposition, disposition};
use reqwest::Method;
use url::Url;

use crate::request::{RawResponse, RequestSpec};
use crate::retry::RetryPolicy;
use crate::{CosmosError, Credential, Priority};

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
    /// The priority level every request carries (`x-ms-cosmos-priority-level`); `None`
    /// sends no header, which the service treats as high priority.
    pub priority: Option<Priority>,
}

impl CosmosConfig {
    /// Settings with defaults: certificates checked, 10 s request timeout, 256 pooled
    /// connections, the default [`RetryPolicy`], no priority level.
    pub fn new(endpoint: Url, credential: Credential) -> Self {
        Self {
            endpoint,
            credential,
            accept_invalid_certs: false,
            request_timeout: Duration::from_secs(10),
            max_idle_connections: 256,
            retry: RetryPolicy::default(),
            priority: None,
        }
    }
}

/// A Cosmos DB account client. Cheap to clone: clones share one connection pool.
#[derive(Debug, Clone)]
pub struct CosmosClient {
    inner: Arc<Inner>,
    /// The priority level its requests carry (see [`CosmosClient::with_priority`]).
    priority: Option<Priority>,
    /// How long a throttled request is retried at most (see
    /// [`CosmosClient::with_throttle_wait`]); none: the retry policy's time.
    throttle_wait: Option<Duration>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    /// The endpoint without its trailing slash; request paths start with `/`.
    base: String,
    config: CosmosConfig,
    signatures: Mutex<Signatures>,
}

impl Inner {
    /// The URL of `path` (segments percent-encoded), if resolving it keeps every segment: a
    /// `.` or `..` segment (also spelt `%2E`) would be folded onto the resource above it,
    /// and `/docs/..` would name the container.
    fn url(&self, path: &str) -> Result<Url, CosmosError> {
        let text = format!("{}{}", self.base, path);
        let url = Url::parse(&text).map_err(|e| CosmosError::Config(format!("{text}: {e}")))?;
        if !url.path().ends_with(path) {
            return Err(CosmosError::InvalidName(path.to_string()));
        }
        Ok(url)
    }
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
            priority: config.priority,
            throttle_wait: None,
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

    /// This client, sharing its connection pool, with every request marked `priority`
    /// (priority-based execution: when a partition's budget runs short the service throttles
    /// low-priority requests first).
    pub fn with_priority(&self, priority: Priority) -> Self {
        Self {
            priority: Some(priority),
            ..self.clone()
        }
    }

    /// This client, sharing its connection pool, giving a throttled request up (answering
    /// its 429) once retrying it would take longer than `wait` after its first attempt: for
    /// reads that someone waits for, which had better be answered "busy" than held while
    /// the partition's budget goes to the writes.
    pub fn with_throttle_wait(&self, wait: Duration) -> Self {
        Self {
            throttle_wait: Some(wait),
            ..self.clone()
        }
    }

    /// The service refused this client's credential (401/403): a token credential asks for
    /// a new token at the next request instead of sending the one it keeps.
    pub fn credential_refused(&self) {
        self.inner.config.credential.refused();
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
        let url = inner.url(&spec.path)?;
        let (date, auth, auth_is_token) = self.sign(spec).await?;
        let timeout = spec.timeout.unwrap_or(inner.config.request_timeout);
        let mut request = inner
            .http
            .request(spec.method.clone(), url)
            .timeout(timeout)
            .header(headers::DATE, date)
            .header(headers::VERSION, cosmos_wire::API_VERSION)
            .header(reqwest::header::AUTHORIZATION, auth)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(priority) = self.priority {
            request = request.header(headers::PRIORITY_LEVEL, priority.header_value());
        }
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
        if response.status() == reqwest::StatusCode::UNAUTHORIZED && auth_is_token {
            // A token the service no longer takes (expired, revoked, another tenant's):
            // the next request asks for a new one.
            self.credential_refused();
        }
        let mut raw = RawResponse::read_headers(response.status(), response.headers());
        raw.body = response.bytes().await.map_err(map_err)?;
        Ok(raw)
    }

    /// The date header and authorization of a request sent now, and whether the
    /// authorization is a token. Master-key signatures are reused within the second they
    /// were made for.
    async fn sign(&self, spec: &RequestSpec) -> Result<(String, String, bool), CosmosError> {
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
                return Ok((cache.date.clone(), auth, false));
            }
            cache.date.clone()
        };
        let credential = &self.inner.config.credential;
        let auth = credential
            .authorization(spec.method.as_str(), &resource_type, &resource_link, &date)
            .await?;
        Ok((date, auth, matches!(credential, Credential::Token(_))))
    }

    /// Sends a request, retrying throttles and transient failures under the client's
    /// [`RetryPolicy`]. Returns the last response, whatever its status.
    pub(crate) async fn execute(&self, spec: &RequestSpec) -> Result<RawResponse, CosmosError> {
        self.execute_observed(spec, |_| {}).await
    }

    /// [`CosmosClient::execute`], showing every attempt's result to `observe` (to count
    /// calls, RU and 429s).
    pub(crate) async fn execute_observed(
        &self,
        spec: &RequestSpec,
        mut observe: impl FnMut(&Result<RawResponse, CosmosError>),
    ) -> Result<RawResponse, CosmosError> {
        let policy = &self.inner.config.retry;
        let started = Instant::now();
        let (mut attempts, mut failures) = (0, 0);
        loop {
            attempts += 1;
            let result = self.send(spec).await;
            observe(&result);
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
            let delay = policy.delay(failures.max(1), retry_after);
            let waited_enough = self
                .throttle_wait
                .is_some_and(|wait| started.elapsed() + delay > wait);
            if kind == Disposition::Throttled && waited_enough {
                return result;
            }
            tracing::debug!(
                path = %spec.path,
                attempts,
                status = result.as_ref().map(|r| r.status).ok(),
                "retrying request"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

//! Requests to one blob container over the Blob REST API: the URL of a blob, the headers
//! every request carries (`x-ms-version`, `x-ms-date`), authorization by Shared Key or by
//! an Entra ID bearer token, and the service's refusals as [`BlobError`].

use std::sync::Arc;
use std::time::SystemTime;

use entra_credential::{EntraCredential, EntraError, Source};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use url::Url;

use super::listing::ListingError;
use super::shared_key::{KeyError, SharedKey};
use crate::config::{BlobAuth, BlobCheckpoints};

/// The Blob service version of every request (Azurite and the SDKs accept it).
pub const VERSION: &str = "2021-08-06";
/// The Entra ID scope of Azure Storage.
pub const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";

/// Why a Blob Storage request failed.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The request did not reach the service, or its answer was cut.
    #[error("Blob Storage request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The service refused the request.
    #[error("Blob Storage refused to {operation}: {status} {code}{hint}")]
    Status {
        /// What was asked.
        operation: &'static str,
        /// HTTP status.
        status: StatusCode,
        /// `x-ms-error-code`.
        code: String,
        /// What to check, for a refused credential (empty otherwise).
        hint: &'static str,
    },
    /// The account key is unusable.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// No Entra ID token.
    #[error("no Entra ID token for Blob Storage: {0}")]
    Entra(#[from] EntraError),
    /// A value (an owner id, an offset) cannot be sent as a header.
    #[error("{name} cannot be sent as an HTTP header value")]
    HeaderValue {
        /// The header.
        name: String,
    },
    /// The listing is unreadable.
    #[error(transparent)]
    Listing(#[from] ListingError),
    /// The container does not exist and may not be created.
    #[error(
        "the blob container {container} of the Event Hubs checkpoints does not exist: create it (az storage container create --name {container}), or set CHECKPOINT_BLOB_CONTAINER to an existing one"
    )]
    ContainerMissing {
        /// Container.
        container: String,
    },
}

impl BlobError {
    /// The HTTP status of a refusal.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            BlobError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

#[derive(Debug)]
enum Auth {
    SharedKey(SharedKey),
    Entra(Arc<EntraCredential>),
}

/// A client of one container.
#[derive(Debug, Clone)]
pub struct ContainerClient {
    http: reqwest::Client,
    container: Url,
    auth: Arc<Auth>,
}

impl ContainerClient {
    /// A client of the container of `settings`, authorized as they say.
    pub fn new(settings: &BlobCheckpoints) -> Result<Self, BlobError> {
        let auth = match &settings.auth {
            BlobAuth::SharedKey { account, key } => {
                Auth::SharedKey(SharedKey::new(account, key.expose())?)
            }
            BlobAuth::Entra => Auth::Entra(Arc::new(EntraCredential::new(Source::from_env()?)?)),
        };
        let mut container = settings.endpoint.clone();
        container
            .path_segments_mut()
            .expect("an http(s) URL has a path")
            .pop_if_empty()
            .push(&settings.container);
        Ok(ContainerClient {
            // The workspace's reqwest trusts the public roots and SSL_CERT_FILE's.
            http: reqwest::Client::builder().use_rustls_tls().build()?,
            container,
            auth: Arc::new(auth),
        })
    }

    /// The container's URL.
    pub fn container_url(&self) -> Url {
        self.container.clone()
    }

    /// The URL of the blob `name` (its `/`-separated parts as path segments).
    pub fn blob_url(&self, name: &str) -> Url {
        let mut url = self.container.clone();
        url.path_segments_mut()
            .expect("an http(s) URL has a path")
            .extend(name.split('/'));
        url
    }

    /// Sends a request without body; a status other than 2xx is a [`BlobError::Status`].
    pub async fn send(
        &self,
        operation: &'static str,
        method: Method,
        url: Url,
        extra: &[(&str, &str)],
    ) -> Result<reqwest::Response, BlobError> {
        let mut headers = HeaderMap::new();
        headers.insert("x-ms-version", HeaderValue::from_static(VERSION));
        let date = httpdate::fmt_http_date(SystemTime::now());
        headers.insert(
            "x-ms-date",
            HeaderValue::from_str(&date).expect("an HTTP date is a header value"),
        );
        if method == Method::PUT {
            headers.insert("content-length", HeaderValue::from_static("0"));
        }
        for (name, value) in extra {
            headers.insert(
                HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
                HeaderValue::from_str(value).map_err(|_| BlobError::HeaderValue {
                    name: (*name).to_owned(),
                })?,
            );
        }
        let authorization = match self.auth.as_ref() {
            Auth::SharedKey(key) => key.authorization(&method, &url, &headers),
            Auth::Entra(credential) => {
                format!("Bearer {}", credential.token(STORAGE_SCOPE).await?)
            }
        };
        headers.insert(
            "authorization",
            HeaderValue::from_str(&authorization).expect("a header value"),
        );
        let response = self
            .http
            .request(method, url)
            .headers(headers)
            .send()
            .await?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let code = response
            .headers()
            .get("x-ms-error-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let refused = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
        let hint = match self.auth.as_ref() {
            Auth::Entra(credential) if refused => {
                credential.renew();
                "; check that the writer's identity has the role \"Storage Blob Data Contributor\" on the container or its account (az role assignment create), and its tenant (AZURE_TENANT_ID); a new token is asked for at the next attempt"
            }
            Auth::SharedKey(_) if refused => {
                "; check the account name and key of CHECKPOINT_BLOB_CONNECTION_STRING"
            }
            _ => "",
        };
        Err(BlobError::Status {
            operation,
            status,
            code,
            hint,
        })
    }
}

//! Entra ID (Azure AD) access tokens for the programs' Azure clients, through Microsoft's
//! `azure_identity`: which credential a program uses ([`Source`]: workload identity on
//! AKS, a managed identity, an app's client secret, or the Azure CLI on a developer's
//! machine), chosen by `AZURE_CREDENTIAL` or from the environment the platform sets, and
//! the Cosmos DB token credential built on it ([`CosmosTokens`]); and the Cosmos DB
//! credential a program's `COSMOS_AUTH` names ([`cosmos_credential`]), with the client
//! configuration of a resolved account ([`cosmos_config`]).
//!
//! The credentials read their usual variables themselves (`AZURE_TENANT_ID`,
//! `AZURE_CLIENT_ID`, `AZURE_FEDERATED_TOKEN_FILE`, `IDENTITY_ENDPOINT`, `IDENTITY_HEADER`,
//! `AZURE_AUTHORITY_HOST`); the client secret comes from `AZURE_CLIENT_SECRET` or the file
//! `AZURE_CLIENT_SECRET_FILE` names, as every secret of the project does. Their HTTP goes
//! through [`transport`]: the workspace's reqwest, trusting the public roots and the
//! system's store (`SSL_CERT_FILE` adds a private issuer's CA).

mod transport;

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use azure_core::credentials::TokenCredential as AzureTokenCredential;
use azure_core::http::{ClientOptions, Transport};
use azure_identity::{
    AzureCliCredential, ClientAssertionCredentialOptions, ClientSecretCredential,
    ClientSecretCredentialOptions, ManagedIdentityCredential, ManagedIdentityCredentialOptions,
    WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};
use futures::FutureExt;
use futures::future::BoxFuture;

/// The scope of a Cosmos DB account's data plane.
pub const COSMOS_SCOPE: &str = "https://cosmos.azure.com/.default";

/// Where tokens come from (`AZURE_CREDENTIAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// AKS workload identity: a federated service-account token (`AZURE_FEDERATED_TOKEN_FILE`)
    /// exchanged for the app's token.
    Workload,
    /// The host's managed identity (App Service, Container Apps, Arc, or a VM's IMDS).
    Managed,
    /// An app registration's client secret (`AZURE_CLIENT_SECRET` or its `_FILE`).
    Secret,
    /// The signed-in Azure CLI (`az login`), for a developer's machine.
    Cli,
}

impl Source {
    /// Every source, in the order [`Source::detect`] tries them.
    pub const ALL: [Source; 4] = [
        Source::Workload,
        Source::Secret,
        Source::Managed,
        Source::Cli,
    ];

    /// Its `AZURE_CREDENTIAL` value.
    pub fn name(self) -> &'static str {
        match self {
            Source::Workload => "workload",
            Source::Managed => "managed",
            Source::Secret => "secret",
            Source::Cli => "cli",
        }
    }

    /// `AZURE_CREDENTIAL`, or when it is not set, the source the environment points at.
    pub fn from_env() -> Result<Source, EntraError> {
        match std::env::var("AZURE_CREDENTIAL") {
            Ok(value) => value
                .parse()
                .map_err(|message| EntraError::Setting { message }),
            Err(_) => Ok(Source::detect(|name| std::env::var_os(name).is_some())),
        }
    }

    /// The source the environment points at: workload identity where the AKS webhook set
    /// `AZURE_FEDERATED_TOKEN_FILE`, a client secret where one is given, and otherwise the
    /// host's managed identity.
    pub fn detect(var: impl Fn(&str) -> bool) -> Source {
        if var("AZURE_FEDERATED_TOKEN_FILE") {
            Source::Workload
        } else if var("AZURE_CLIENT_SECRET") || var("AZURE_CLIENT_SECRET_FILE") {
            Source::Secret
        } else {
            Source::Managed
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Source {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Source::ALL
            .into_iter()
            .find(|source| source.name() == s)
            .ok_or_else(|| {
                format!(
                    "'{s}' is not a credential: write workload, managed, secret or cli (or leave AZURE_CREDENTIAL unset to choose from the environment)"
                )
            })
    }
}

/// Why a credential could not be built or gave no token.
#[derive(Debug, thiserror::Error)]
pub enum EntraError {
    /// `AZURE_CREDENTIAL` names no credential.
    #[error("AZURE_CREDENTIAL: {message}")]
    Setting {
        /// What to write instead.
        message: String,
    },
    /// `COSMOS_KEY` is not an account key.
    #[error("COSMOS_KEY is not a base64 account key: {message}")]
    AccountKey {
        /// Why.
        message: String,
    },
    /// The credential's settings are missing or wrong.
    #[error("{credential} credential: {message}")]
    Setup {
        /// Which credential.
        credential: Source,
        /// What is wrong, with the variable to set.
        message: String,
    },
    /// Asking for a token failed.
    #[error("no Entra ID token for {scope} from the {credential} credential: {message}")]
    Token {
        /// Which credential.
        credential: Source,
        /// The scope asked for.
        scope: String,
        /// azure_identity's error.
        message: String,
    },
}

/// An Entra ID credential: tokens for any scope, cached and renewed by `azure_identity`
/// before they expire.
pub struct EntraCredential {
    source: Source,
    inner: RwLock<Arc<dyn AzureTokenCredential>>,
    /// When [`EntraCredential::renew`] last dropped the cached tokens.
    renewed: Mutex<Option<Instant>>,
}

/// Least time between two renewals: a burst of refusals (every request in flight when a
/// token expired) costs the issuer one token request, not one each.
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// A token handed to the Azure SDKs expires later than this, or is asked for anew.
/// The Event Hubs SDK renews its CBS token 6 minutes (and up to 5 s) before it expires;
/// `azure_identity`'s cache hands the same token out until 5 minutes before; and the SDK,
/// given a token whose expiry did not advance, stops renewing that link for good and
/// leaves the service to drop it when the token expires: a session break an hour into
/// every run (seen against the local hub with 7-minute tokens).
const SDK_RENEWS_AHEAD: Duration = Duration::from_secs(7 * 60);

impl fmt::Debug for EntraCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntraCredential")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl EntraCredential {
    /// The credential of `source`, with its settings from the environment.
    pub fn new(source: Source) -> Result<EntraCredential, EntraError> {
        Ok(EntraCredential {
            source,
            inner: RwLock::new(build(source)?),
            renewed: Mutex::new(None),
        })
    }

    /// Where its tokens come from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// A token for `scope` (cached until shortly before it expires).
    pub async fn token(&self, scope: &str) -> Result<String, EntraError> {
        let inner = self.current();
        let token = inner
            .get_token(&[scope], None)
            .await
            .map_err(|e| EntraError::Token {
                credential: self.source,
                scope: scope.to_string(),
                message: e.to_string(),
            })?;
        Ok(token.token.secret().to_string())
    }

    /// Drops the cached tokens (a service refused one): the next [`EntraCredential::token`]
    /// asks the issuer again; at most once per [`RENEW_EVERY`]. Keeps the current
    /// credential if a new one cannot be built.
    pub fn renew(&self) {
        {
            let mut renewed = self.renewed.lock().expect("never left poisoned");
            if renewed.is_some_and(|at| at.elapsed() < RENEW_EVERY) {
                return;
            }
            *renewed = Some(Instant::now());
        }
        tracing::info!(credential = %self.source, "a service refused the Entra ID token: asking for a new one");
        self.rebuild();
    }

    /// A new inner credential: its cache starts empty.
    fn rebuild(&self) {
        match build(self.source) {
            Ok(fresh) => *self.inner.write().expect("never left poisoned") = fresh,
            Err(e) => tracing::warn!(error = %e, "cannot renew the Entra ID credential"),
        }
    }

    fn current(&self) -> Arc<dyn AzureTokenCredential> {
        self.inner.read().expect("never left poisoned").clone()
    }

    /// This credential as the Azure SDKs take one (the Event Hubs client): tokens of the
    /// credential in use, also after a [`EntraCredential::renew`].
    pub fn for_azure_sdk(self: &Arc<Self>) -> Arc<dyn AzureTokenCredential> {
        Arc::new(ForAzureSdk(self.clone()))
    }
}

/// [`EntraCredential::for_azure_sdk`].
#[derive(Debug)]
struct ForAzureSdk(Arc<EntraCredential>);

#[async_trait::async_trait]
impl AzureTokenCredential for ForAzureSdk {
    async fn get_token(
        &self,
        scopes: &[&str],
        options: Option<azure_core::credentials::TokenRequestOptions<'_>>,
    ) -> azure_core::Result<azure_core::credentials::AccessToken> {
        let token = self.0.current().get_token(scopes, options.clone()).await?;
        let left = token.expires_on - azure_core::time::OffsetDateTime::now_utc();
        if left > SDK_RENEWS_AHEAD {
            return Ok(token);
        }
        tracing::debug!(credential = %self.0.source, seconds_left = left.whole_seconds(), "the cached token expires soon: asking for a new one");
        self.0.rebuild();
        self.0.current().get_token(scopes, options).await
    }
}

/// The Cosmos DB data plane's token credential ([`COSMOS_SCOPE`]) on an [`EntraCredential`].
#[derive(Debug, Clone)]
pub struct CosmosTokens(pub Arc<EntraCredential>);

impl cosmos::TokenCredential for CosmosTokens {
    fn token(&self) -> BoxFuture<'_, Result<String, cosmos::CosmosError>> {
        async move {
            self.0
                .token(COSMOS_SCOPE)
                .await
                .map_err(|e| cosmos::CosmosError::Credential(e.to_string()))
        }
        .boxed()
    }

    fn refused(&self) {
        self.0.renew();
    }
}

/// The Cosmos DB credential `auth` names: the account key, or Entra ID tokens for
/// [`COSMOS_SCOPE`] from the credential [`Source::from_env`] chooses (logged).
pub fn cosmos_credential(auth: &settings::AccountAuth) -> Result<cosmos::Credential, EntraError> {
    match auth {
        settings::AccountAuth::Key(key) => cosmos::MasterKey::from_base64(key.expose())
            .map(cosmos::Credential::MasterKey)
            .map_err(|e| EntraError::AccountKey {
                message: e.to_string(),
            }),
        settings::AccountAuth::Entra => {
            let source = Source::from_env()?;
            tracing::info!(credential = %source, "Cosmos DB requests carry Entra ID tokens");
            let tokens = CosmosTokens(Arc::new(EntraCredential::new(source)?));
            Ok(cosmos::Credential::Token(Arc::new(tokens)))
        }
    }
}

/// The client configuration of `account`: its endpoint, the credential its `auth` names
/// ([`cosmos_credential`]) and whether it takes self-signed certificates; what
/// `COSMOS_ALLOW_INSECURE` let through is logged as a warning.
pub fn cosmos_config(
    account: &settings::CosmosAccount,
) -> Result<cosmos::CosmosConfig, EntraError> {
    let credential = cosmos_credential(&account.auth)?;
    let mut config = cosmos::CosmosConfig::new(account.endpoint.clone(), credential);
    config.accept_invalid_certs = account.accept_invalid_certs;
    if let Some(insecure) = &account.insecure {
        tracing::warn!("{insecure}");
    }
    Ok(config)
}

/// The options of every credential: its requests through [`transport::http_client`].
fn client_options(source: Source) -> Result<ClientOptions, EntraError> {
    let client = transport::http_client().map_err(|e| EntraError::Setup {
        credential: source,
        message: format!("no HTTP client for the token requests (check SSL_CERT_FILE): {e}"),
    })?;
    Ok(ClientOptions {
        transport: Some(Transport::new(client)),
        ..ClientOptions::default()
    })
}

fn build(source: Source) -> Result<Arc<dyn AzureTokenCredential>, EntraError> {
    let setup = |e: azure_core::Error| EntraError::Setup {
        credential: source,
        message: e.to_string(),
    };
    let required = |name: &str| {
        std::env::var(name).map_err(|_| EntraError::Setup {
            credential: source,
            message: format!("{name} is not set"),
        })
    };
    Ok(match source {
        Source::Workload => {
            WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
                credential_options: ClientAssertionCredentialOptions {
                    client_options: client_options(source)?,
                },
                ..Default::default()
            }))
            .map_err(setup)?
        }
        Source::Managed => ManagedIdentityCredential::new(Some(ManagedIdentityCredentialOptions {
            client_options: client_options(source)?,
            ..Default::default()
        }))
        .map_err(setup)?,
        Source::Secret => {
            let secret = settings::secret_from_env("AZURE_CLIENT_SECRET")
                .map_err(|e| EntraError::Setup {
                    credential: source,
                    message: e.to_string(),
                })?
                .ok_or_else(|| EntraError::Setup {
                    credential: source,
                    message: "AZURE_CLIENT_SECRET (or AZURE_CLIENT_SECRET_FILE) is not set".into(),
                })?;
            ClientSecretCredential::new(
                &required("AZURE_TENANT_ID")?,
                required("AZURE_CLIENT_ID")?,
                secret.expose().to_string().into(),
                Some(ClientSecretCredentialOptions {
                    client_options: client_options(source)?,
                }),
            )
            .map_err(setup)?
        }
        Source::Cli => AzureCliCredential::new(None).map_err(setup)?,
    })
}

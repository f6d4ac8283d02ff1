//! Starting and stopping an issuer: [`EntraSim::builder`] for tests, [`EntraSim::start`] for
//! a whole [`Config`]; the listener (plain HTTP, or HTTPS with a CA made at start) and the
//! URLs clients are given.

use crate::certs::{Ca, CertError};
use crate::config::Config;
use crate::directory::{Directory, DirectoryError};
use crate::keys::KeyError;
use crate::server::{self, Issuer, MANAGED_IDENTITY_PATH};
use http_serve::{Limits, RustlsConfig};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Why an issuer could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is inconsistent.
    #[error(transparent)]
    Directory(#[from] DirectoryError),
    /// The listening address could not be bound.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The signing key could not be made.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The HTTPS certificate could not be made.
    #[error(transparent)]
    Cert(#[from] CertError),
}

/// How to listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    /// The address to bind (port 0: a free port).
    pub addr: SocketAddr,
    /// HTTPS with a CA made at start (MSAL and azure-identity accept only `https`
    /// authorities); plain HTTP otherwise.
    pub https: bool,
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            https: false,
        }
    }
}

/// A running issuer. Dropping it stops it.
pub struct EntraSim {
    issuer: Arc<Issuer>,
    #[cfg(feature = "test-support")]
    addr: SocketAddr,
    ca_pem: Option<String>,
    /// Stops the listener and closes its connections at once.
    stop: CancellationToken,
}

impl EntraSim {
    /// Starts an issuer for `config`, listening as `listen` says.
    pub async fn start(config: Config, listen: Listen) -> Result<EntraSim, StartError> {
        let directory = Directory::new(config)?;
        let listener = TcpListener::bind(listen.addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: listen.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: listen.addr,
            source,
        })?;
        let host = if addr.ip().is_unspecified() {
            SocketAddr::from((Ipv4Addr::LOCALHOST, addr.port()))
        } else {
            addr
        };
        let (scheme, acceptor, ca_pem) = if listen.https {
            let ca = Ca::generate()?;
            let tls = RustlsConfig::from_config(ca.server_config()?);
            ("https", Some(tls), Some(ca.cert_pem))
        } else {
            ("http", None, None)
        };
        let issuer = Arc::new(Issuer::new(directory, format!("{scheme}://{host}"))?);
        let router = server::router(issuer.clone());
        let stop = CancellationToken::new();
        tokio::spawn({
            let stop = stop.clone();
            async move {
                if let Err(err) =
                    http_serve::serve(listener, router, Limits::LOCAL, acceptor, stop).await
                {
                    tracing::warn!(error = %err, "the issuer stopped serving");
                }
            }
        });
        Ok(EntraSim {
            issuer,
            #[cfg(feature = "test-support")]
            addr,
            ca_pem,
            stop,
        })
    }

    /// The tenant id.
    pub fn tenant_id(&self) -> &str {
        &self.issuer.directory.tenant_id
    }

    /// `{base}/{tenant}`: MSAL's `authority`.
    pub fn authority(&self) -> String {
        self.issuer.authority()
    }

    /// `{base}/{tenant}/v2.0`: every token's `iss`.
    pub fn issuer(&self) -> String {
        self.issuer.issuer()
    }

    /// The OpenID configuration document's URL.
    pub fn discovery_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.issuer())
    }

    /// The token endpoint.
    pub fn token_endpoint(&self) -> String {
        self.issuer.token_endpoint()
    }

    /// The managed identity endpoint (`IDENTITY_ENDPOINT`).
    pub fn identity_endpoint(&self) -> String {
        format!("{}{MANAGED_IDENTITY_PATH}", self.issuer.base)
    }

    /// The managed identity endpoint's secret (`IDENTITY_HEADER`).
    pub fn identity_header(&self) -> &str {
        &self.issuer.directory.identity_header
    }

    /// The CA certificate (PEM) to trust, when serving HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Stops listening and drops every connection.
    pub fn shutdown(self) {}
}

/// The calls only tests make (cargo feature `test-support`): a directory built in code, the
/// issuer's clock and keys changed while it runs, and what tests read of it.
#[cfg(feature = "test-support")]
pub(crate) mod test_support {
    use super::{EntraSim, Listen, StartError};
    use crate::config::{App, Config, ManagedIdentity, User};
    use crate::keys::KeyError;
    use std::net::SocketAddr;
    use std::time::Duration;

    /// Builds a configuration in code (what tests use).
    #[derive(Debug, Default)]
    pub struct Builder {
        config: Config,
        listen: Listen,
    }

    impl Builder {
        /// Sets the tenant id (random by default).
        pub fn tenant_id(mut self, tenant_id: impl Into<String>) -> Builder {
            self.config.tenant_id = tenant_id.into();
            self
        }

        /// Registers an app.
        pub fn app(mut self, app: App) -> Builder {
            self.config.apps.push(app);
            self
        }

        /// Adds a user (the first signs in when the authorization request has no `login_hint`).
        pub fn user(mut self, user: User) -> Builder {
            self.config.users.push(user);
            self
        }

        /// Adds a managed identity (the first is the system-assigned one).
        pub fn managed_identity(mut self, identity: ManagedIdentity) -> Builder {
            self.config.managed_identities.push(identity);
            self
        }

        /// Sets the lifetime of access and ID tokens (whole seconds).
        pub fn token_lifetime(mut self, lifetime: Duration) -> Builder {
            self.config.token_lifetime_secs = lifetime.as_secs();
            self
        }

        /// Issues tokens as if the issuer's clock ran `behind` the real one (an already expired
        /// token, once `behind` exceeds the lifetime plus the resource's allowed skew); see also
        /// [`EntraSim::set_clock_behind`].
        pub fn clock_behind(mut self, behind: Duration) -> Builder {
            self.config.clock_behind_secs = behind.as_secs();
            self
        }

        /// Serves HTTPS, with a CA made at start ([`EntraSim::ca_pem`]).
        pub fn https(mut self) -> Builder {
            self.listen.https = true;
            self
        }

        /// Starts the issuer on a free port of 127.0.0.1.
        pub async fn start(self) -> Result<EntraSim, StartError> {
            EntraSim::start(self.config, self.listen).await
        }
    }

    impl EntraSim {
        /// From now on, issues tokens as if its clock ran `behind` the real one.
        pub fn set_clock_behind(&self, behind: Duration) {
            self.issuer
                .directory
                .clock_behind_secs
                .store(behind.as_secs(), std::sync::atomic::Ordering::Relaxed);
        }

        /// A builder with an empty directory.
        pub fn builder() -> Builder {
            Builder::default()
        }

        /// The bound address.
        pub fn addr(&self) -> SocketAddr {
            self.addr
        }

        /// `scheme://host:port`.
        pub fn base_url(&self) -> &str {
            &self.issuer.base
        }

        /// The local cluster's service-account issuer, which [`crate::App::federated`] trusts.
        pub fn cluster_issuer(&self) -> String {
            self.issuer.cluster_issuer()
        }

        /// A service-account token for `subject` (`system:serviceaccount:{namespace}:{name}`),
        /// what AKS writes to `AZURE_FEDERATED_TOKEN_FILE`.
        pub fn service_account_token(&self, subject: &str) -> Result<String, KeyError> {
            self.issuer.service_account_token(subject)
        }

        /// The object id of app `client_id`'s service principal, of managed identity
        /// `client_id`, or of user `client_id` (by username).
        pub fn object_id(&self, name: &str) -> Option<&str> {
            let directory = &self.issuer.directory;
            directory
                .app(name)
                .map(|a| a.app.object_id.as_str())
                .or_else(|| {
                    directory
                        .identity(Some(name), None)
                        .map(|i| i.identity.object_id.as_str())
                })
                .or_else(|| {
                    directory
                        .user(Some(name))
                        .map(|u| directory.users[u].user.object_id.as_str())
                })
        }

        /// Signs with a new key from now on; the previous key stays published until the next
        /// rotation. Returns the new `kid` (also `POST /_sim/keys/rotate`).
        pub fn rotate_keys(&self) -> Result<String, KeyError> {
            self.issuer.rotate_keys()
        }
    }
}

impl Drop for EntraSim {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

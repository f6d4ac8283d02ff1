//! The directory as configured: the tenant, its app registrations (clients and the APIs they
//! call), its users and its managed identities, with the builder methods tests use and the
//! serde shape of the binary's JSON or TOML file. Checking it (and indexing it for look-ups)
//! is [`crate::directory`]'s.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Default lifetime of access and ID tokens (Entra's default is 60 to 90 minutes).
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// Roles held, by resource: the resource's app id URI or client id, then role values.
pub type RoleAssignments = BTreeMap<String, Vec<String>>;

/// The whole configuration of one issuer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The tenant id (a GUID in Entra; any path segment here). Random when empty.
    #[serde(default)]
    pub tenant_id: String,
    /// App registrations: clients, and the APIs (resources) tokens are issued for.
    #[serde(default)]
    pub apps: Vec<App>,
    /// Users who sign in through the authorization endpoint.
    #[serde(default)]
    pub users: Vec<User>,
    /// Managed identities; the first is the system-assigned one.
    #[serde(default)]
    pub managed_identities: Vec<ManagedIdentity>,
    /// Lifetime of access and ID tokens, in seconds.
    #[serde(default = "default_lifetime_secs")]
    pub token_lifetime_secs: u64,
    /// Seconds the issuer's clock runs behind: tokens are issued (`iat`, `nbf`, `exp`) as of
    /// that long ago, as by an issuer with a wrong clock; with more than the lifetime plus a
    /// resource's allowed skew, every token it issues is already expired there.
    #[serde(default)]
    pub clock_behind_secs: u64,
    /// The secret the managed identity endpoint expects in `X-IDENTITY-HEADER` (what App
    /// Service puts in `IDENTITY_HEADER`). Random when absent.
    #[serde(default)]
    pub identity_header: Option<String>,
}

fn default_lifetime_secs() -> u64 {
    DEFAULT_TOKEN_LIFETIME.as_secs()
}

impl Default for Config {
    fn default() -> Self {
        Config {
            tenant_id: String::new(),
            apps: Vec::new(),
            users: Vec::new(),
            managed_identities: Vec::new(),
            token_lifetime_secs: default_lifetime_secs(),
            clock_behind_secs: 0,
            identity_header: None,
        }
    }
}

/// An app registration (with its service principal).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct App {
    /// The application (client) id.
    pub client_id: String,
    /// The service principal's object id (the `oid` of its app-only tokens). Random when empty.
    #[serde(default)]
    pub object_id: String,
    /// Client secrets (their values).
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Certificates (PEM) whose keys sign client assertions.
    #[serde(default)]
    pub certificates: Vec<String>,
    /// Federated identity credentials: the subjects (`system:serviceaccount:{namespace}:{name}`)
    /// whose service-account tokens from the local cluster issuer
    /// ([`crate::EntraSim::cluster_issuer`]) it takes as client assertions, as AKS workload
    /// identity sets them up.
    #[serde(default)]
    pub federated_subjects: Vec<String>,
    /// Redirect URIs the authorization endpoint accepts, compared exactly.
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    /// A public client (mobile, desktop, single-page): redeems codes without a credential.
    #[serde(default)]
    pub public_client: bool,
    /// The application id URI (`api://...`, `https://cosmos.azure.com`), if it is an API.
    #[serde(default)]
    pub app_id_uri: Option<String>,
    /// App roles it defines (values), as an API.
    #[serde(default)]
    pub app_roles: Vec<String>,
    /// Delegated permissions it exposes (scope values such as `Fleet.Read`), as an API.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// App roles assigned to its service principal, by resource.
    #[serde(default)]
    pub roles: RoleAssignments,
    /// The shape of the access tokens issued for it, as an API (the manifest's
    /// `accessTokenAcceptedVersion`): 2 here by default; Microsoft's own resources, such as
    /// Azure Storage, take version 1.
    #[serde(default)]
    pub access_token_accepted_version: TokenVersion,
}

/// The shape of an access token: Entra's v1.0 (`iss` `https://sts.windows.net/{tenant}/`,
/// `appid`) or v2.0 (`iss` `{authority}/v2.0`, `azp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "u8")]
pub enum TokenVersion {
    /// Version 1.0.
    V1,
    /// Version 2.0.
    #[default]
    V2,
}

impl TryFrom<u8> for TokenVersion {
    type Error = String;

    fn try_from(version: u8) -> Result<Self, Self::Error> {
        match version {
            1 => Ok(TokenVersion::V1),
            2 => Ok(TokenVersion::V2),
            other => Err(format!(
                "access_token_accepted_version {other} is not a token version: write 1 or 2"
            )),
        }
    }
}

/// A user of the tenant.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// The user principal name (`preferred_username`), also what `login_hint` names.
    pub username: String,
    /// The display name (`name`).
    #[serde(default)]
    pub name: String,
    /// The object id (`oid`). Random when empty.
    #[serde(default)]
    pub object_id: String,
    /// App roles assigned to the user, by resource.
    #[serde(default)]
    pub roles: RoleAssignments,
}

/// A managed identity.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManagedIdentity {
    /// Its client id (what `client_id=` selects a user-assigned identity by). Random when empty.
    #[serde(default)]
    pub client_id: String,
    /// Its object id (`oid`, `sub`). Random when empty.
    #[serde(default)]
    pub object_id: String,
    /// App roles assigned to it, by resource.
    #[serde(default)]
    pub roles: RoleAssignments,
}

#[cfg(feature = "test-support")]
fn assign(roles: &mut RoleAssignments, resource: &str, role: &str) {
    roles
        .entry(resource.to_owned())
        .or_default()
        .push(role.to_owned());
}

#[cfg(feature = "test-support")]
impl App {
    /// An app registration with client id `client_id` and nothing else.
    pub fn new(client_id: impl Into<String>) -> App {
        App {
            client_id: client_id.into(),
            ..App::default()
        }
    }

    /// Adds a client secret.
    pub fn secret(mut self, secret: impl Into<String>) -> App {
        self.secrets.push(secret.into());
        self
    }

    /// Adds a certificate (PEM) for client assertions.
    pub fn certificate(mut self, pem: impl Into<String>) -> App {
        self.certificates.push(pem.into());
        self
    }

    /// Adds a federated identity credential for the local cluster issuer's `subject`.
    pub fn federated(mut self, subject: impl Into<String>) -> App {
        self.federated_subjects.push(subject.into());
        self
    }

    /// Adds a redirect URI.
    pub fn redirect_uri(mut self, uri: impl Into<String>) -> App {
        self.redirect_uris.push(uri.into());
        self
    }

    /// Marks it a public client (no credential when redeeming codes).
    pub fn public_client(mut self) -> App {
        self.public_client = true;
        self
    }

    /// Sets its application id URI (it is an API).
    pub fn app_id_uri(mut self, uri: impl Into<String>) -> App {
        self.app_id_uri = Some(uri.into());
        self
    }

    /// Issues its access tokens in version 1.0 (as an API), as Entra does for Azure Storage.
    pub fn v1_tokens(mut self) -> App {
        self.access_token_accepted_version = TokenVersion::V1;
        self
    }

    /// Defines an app role (as an API).
    pub fn app_role(mut self, value: impl Into<String>) -> App {
        self.app_roles.push(value.into());
        self
    }

    /// Exposes a delegated permission (as an API).
    pub fn scope(mut self, value: impl Into<String>) -> App {
        self.scopes.push(value.into());
        self
    }

    /// Assigns it app role `role` of `resource` (app id URI or client id).
    pub fn role(mut self, resource: &str, role: &str) -> App {
        assign(&mut self.roles, resource, role);
        self
    }
}

#[cfg(feature = "test-support")]
impl User {
    /// A user signing in as `username`.
    pub fn new(username: impl Into<String>) -> User {
        User {
            username: username.into(),
            ..User::default()
        }
    }

    /// Assigns the user app role `role` of `resource` (app id URI or client id).
    pub fn role(mut self, resource: &str, role: &str) -> User {
        assign(&mut self.roles, resource, role);
        self
    }
}

#[cfg(feature = "test-support")]
impl ManagedIdentity {
    /// A managed identity with client id `client_id` (random when empty).
    pub fn new(client_id: impl Into<String>) -> ManagedIdentity {
        ManagedIdentity {
            client_id: client_id.into(),
            ..ManagedIdentity::default()
        }
    }

    /// Assigns it app role `role` of `resource` (app id URI or client id).
    pub fn role(mut self, resource: &str, role: &str) -> ManagedIdentity {
        assign(&mut self.roles, resource, role);
        self
    }
}

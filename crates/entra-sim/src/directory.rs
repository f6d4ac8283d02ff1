//! The configuration checked and indexed for the endpoints: apps by client id, resources by
//! app id URI or client id, app registrations' certificates parsed (thumbprints and public
//! keys), role assignments resolved to their resource, and the ids left empty filled in.

use crate::config::{App, Config, ManagedIdentity, RoleAssignments, User};
use crate::keys::{new_guid, new_opaque};
use aws_lc_rs::digest::{SHA1_FOR_LEGACY_USE_ONLY, SHA256, digest};
use std::collections::{BTreeMap, HashMap};

/// Why a configuration cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    /// Two app registrations share a client id, or two apps an app id URI.
    #[error("app '{0}' is registered twice (client id or app id URI)")]
    Duplicate(String),
    /// A role assignment names a resource no app registration is.
    #[error(
        "{principal}: role assignment on '{resource}', which is no app's client id or app id URI"
    )]
    UnknownResource {
        /// Who holds the assignment.
        principal: String,
        /// The resource named.
        resource: String,
    },
    /// A role assignment names a role its resource does not define.
    #[error("{principal}: role '{role}' is not an app role of '{resource}'")]
    UnknownRole {
        /// Who holds the assignment.
        principal: String,
        /// The resource.
        resource: String,
        /// The role.
        role: String,
    },
    /// An app's certificate is not a PEM X.509 certificate.
    #[error("app '{client_id}': certificate: {reason}")]
    Certificate {
        /// The app.
        client_id: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A registered certificate: its thumbprints and RSA public key.
#[derive(Debug, Clone)]
pub struct Certificate {
    /// SHA-1 of the DER (what `x5t` names).
    pub sha1: Vec<u8>,
    /// SHA-256 of the DER (what `x5t#S256` names).
    pub sha256: Vec<u8>,
    /// The subject public key (PKCS#1 `RSAPublicKey` DER).
    pub public_key: Vec<u8>,
}

impl Certificate {
    fn parse(client_id: &str, pem: &str) -> Result<Certificate, DirectoryError> {
        let fail = |reason: String| DirectoryError::Certificate {
            client_id: client_id.to_owned(),
            reason,
        };
        let (_, pem) =
            x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| fail(e.to_string()))?;
        let cert = pem.parse_x509().map_err(|e| fail(e.to_string()))?;
        Ok(Certificate {
            sha1: digest(&SHA1_FOR_LEGACY_USE_ONLY, &pem.contents)
                .as_ref()
                .to_vec(),
            sha256: digest(&SHA256, &pem.contents).as_ref().to_vec(),
            public_key: cert.public_key().subject_public_key.data.to_vec(),
        })
    }
}

/// A principal's roles, by resource index (into [`Directory::apps`]).
pub type Roles = BTreeMap<usize, Vec<String>>;

/// An app registration as served.
#[derive(Debug)]
pub struct AppEntry {
    /// The registration as configured (ids filled in).
    pub app: App,
    /// Its certificates, parsed.
    pub certificates: Vec<Certificate>,
    /// Its service principal's roles.
    pub roles: Roles,
}

/// A user as served.
#[derive(Debug)]
pub struct UserEntry {
    /// The user as configured (ids filled in).
    pub user: User,
    /// The user's roles.
    pub roles: Roles,
}

/// A managed identity as served.
#[derive(Debug)]
pub struct IdentityEntry {
    /// The identity as configured (ids filled in).
    pub identity: ManagedIdentity,
    /// Its roles.
    pub roles: Roles,
}

/// The tenant's directory.
#[derive(Debug)]
pub struct Directory {
    /// The tenant id.
    pub tenant_id: String,
    /// App registrations, in configured order.
    pub apps: Vec<AppEntry>,
    /// Users, in configured order (the first signs in when no `login_hint` is given).
    pub users: Vec<UserEntry>,
    /// Managed identities (the first is the system-assigned one).
    pub identities: Vec<IdentityEntry>,
    /// The managed identity endpoint's `X-IDENTITY-HEADER` secret.
    pub identity_header: String,
    /// The configured token lifetime, in seconds.
    pub token_lifetime_secs: u64,
    /// Seconds the issuer's clock runs behind (changed while it runs by
    /// [`crate::EntraSim::set_clock_behind`]).
    pub clock_behind_secs: std::sync::atomic::AtomicU64,
    by_client_id: HashMap<String, usize>,
    by_resource: HashMap<String, usize>,
}

fn fill(id: &mut String) {
    if id.is_empty() {
        *id = new_guid();
    }
}

impl Directory {
    /// Checks and indexes `config`.
    pub fn new(mut config: Config) -> Result<Directory, DirectoryError> {
        fill(&mut config.tenant_id);
        let mut by_client_id = HashMap::new();
        let mut by_resource = HashMap::new();
        for (i, app) in config.apps.iter_mut().enumerate() {
            fill(&mut app.object_id);
            let names = std::iter::once(&app.client_id).chain(app.app_id_uri.as_ref());
            for name in names {
                if by_resource.insert(name.clone(), i).is_some() {
                    return Err(DirectoryError::Duplicate(name.clone()));
                }
            }
            by_client_id.insert(app.client_id.clone(), i);
        }
        let resolve = |principal: &str, assignments: &RoleAssignments| {
            let mut roles = Roles::new();
            for (resource, values) in assignments {
                let index = *by_resource.get(resource.as_str()).ok_or_else(|| {
                    DirectoryError::UnknownResource {
                        principal: principal.to_owned(),
                        resource: resource.clone(),
                    }
                })?;
                for role in values {
                    if !config.apps[index].app_roles.contains(role) {
                        return Err(DirectoryError::UnknownRole {
                            principal: principal.to_owned(),
                            resource: resource.clone(),
                            role: role.clone(),
                        });
                    }
                    roles.entry(index).or_default().push(role.clone());
                }
            }
            Ok(roles)
        };
        let mut apps = Vec::new();
        for app in &config.apps {
            let certificates = app
                .certificates
                .iter()
                .map(|pem| Certificate::parse(&app.client_id, pem))
                .collect::<Result<_, _>>()?;
            let roles = resolve(&app.client_id, &app.roles)?;
            apps.push((certificates, roles));
        }
        let mut users = Vec::new();
        for mut user in config.users.clone() {
            fill(&mut user.object_id);
            let roles = resolve(&user.username, &user.roles)?;
            users.push(UserEntry { user, roles });
        }
        let mut identities = Vec::new();
        for mut identity in config.managed_identities.clone() {
            fill(&mut identity.client_id);
            fill(&mut identity.object_id);
            let roles = resolve(&identity.client_id, &identity.roles)?;
            identities.push(IdentityEntry { identity, roles });
        }
        let apps = config
            .apps
            .into_iter()
            .zip(apps)
            .map(|(app, (certificates, roles))| AppEntry {
                app,
                certificates,
                roles,
            })
            .collect();
        Ok(Directory {
            tenant_id: config.tenant_id,
            apps,
            users,
            identities,
            identity_header: config.identity_header.unwrap_or_else(new_opaque),
            token_lifetime_secs: config.token_lifetime_secs,
            clock_behind_secs: config.clock_behind_secs.into(),
            by_client_id,
            by_resource,
        })
    }

    /// The app registration with client id `client_id`.
    pub fn app(&self, client_id: &str) -> Option<&AppEntry> {
        self.by_client_id.get(client_id).map(|&i| &self.apps[i])
    }

    /// The index of the resource (app) named by app id URI or client id.
    pub fn resource(&self, name: &str) -> Option<usize> {
        self.by_resource.get(name).copied()
    }

    /// The token shape the resource at `index` takes (`None`, Microsoft Graph: v2.0 here).
    pub fn token_version(&self, index: Option<usize>) -> crate::config::TokenVersion {
        index
            .map(|i| self.apps[i].app.access_token_accepted_version)
            .unwrap_or_default()
    }

    /// The index of the user `login_hint` names (case-insensitively), or of the first user
    /// without one.
    pub fn user(&self, login_hint: Option<&str>) -> Option<usize> {
        match login_hint {
            Some(hint) => self
                .users
                .iter()
                .position(|u| u.user.username.eq_ignore_ascii_case(hint)),
            None => (!self.users.is_empty()).then_some(0),
        }
    }

    /// The managed identity `client_id`/`object_id` selects, or the system-assigned one.
    pub fn identity(
        &self,
        client_id: Option<&str>,
        object_id: Option<&str>,
    ) -> Option<&IdentityEntry> {
        match (client_id, object_id) {
            (Some(id), _) => self.identities.iter().find(|i| i.identity.client_id == id),
            (None, Some(id)) => self.identities.iter().find(|i| i.identity.object_id == id),
            (None, None) => self.identities.first(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_the_resource_does_not_define_is_refused() {
        let config = Config {
            apps: vec![
                App::new("api")
                    .app_id_uri("api://fleet")
                    .app_role("Fleet.Read"),
                App::new("writer").role("api://fleet", "Fleet.Write"),
            ],
            ..Config::default()
        };
        let err = Directory::new(config).unwrap_err();
        assert!(matches!(err, DirectoryError::UnknownRole { .. }), "{err}");
    }

    #[test]
    fn roles_resolve_by_app_id_uri_or_client_id() {
        let config = Config {
            apps: vec![
                App::new("api")
                    .app_id_uri("api://fleet")
                    .app_role("Fleet.Read"),
                App::new("writer").role("api", "Fleet.Read"),
            ],
            users: vec![User::new("a@x").role("api://fleet", "Fleet.Read")],
            ..Config::default()
        };
        let dir = Directory::new(config).unwrap();
        assert_eq!(dir.resource("api://fleet"), Some(0));
        assert_eq!(dir.resource("api"), Some(0));
        assert_eq!(dir.app("writer").unwrap().roles[&0], ["Fleet.Read"]);
        assert_eq!(
            dir.users[dir.user(Some("A@X")).unwrap()].roles[&0],
            ["Fleet.Read"]
        );
        assert_eq!(dir.tenant_id.len(), 36);
    }
}

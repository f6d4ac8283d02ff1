//! Reading `scope` parameters as Entra does: `{resource}/.default` for client credentials,
//! and for a signed-in user the OpenID Connect scopes plus permissions of one resource
//! (`api://fleet/Fleet.Read`, or `{resource}/.default` for all it exposes), Microsoft Graph
//! when no resource is named.

use crate::aadsts::Aadsts;
use crate::directory::Directory;
use crate::tokens::GRAPH_APP_ID;

/// The OpenID Connect scopes, which name no resource.
const OIDC_SCOPES: [&str; 4] = ["openid", "profile", "email", "offline_access"];

/// The resource a scope names, as named (`aud`), and its index (`None`: Graph).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The name as requested: `aud` of the token.
    pub aud: String,
    /// Its index in the directory.
    pub index: Option<usize>,
}

/// A user sign-in's scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegated {
    /// The API the access token is for.
    pub resource: Resource,
    /// The delegated permissions granted (`scp`).
    pub scp: Vec<String>,
    /// The OpenID Connect scopes asked for.
    pub oidc: Vec<String>,
}

impl Delegated {
    /// Whether `openid` (an ID token) was asked for.
    pub fn openid(&self) -> bool {
        self.oidc.iter().any(|s| s == "openid")
    }

    /// Whether `offline_access` (a refresh token) was asked for.
    pub fn offline_access(&self) -> bool {
        self.oidc.iter().any(|s| s == "offline_access")
    }

    /// The `scope` of the token response: the permissions, qualified, and the OIDC scopes
    /// but `offline_access`.
    pub fn granted(&self) -> String {
        let resource = &self.resource.aud;
        self.scp
            .iter()
            .map(|s| format!("{resource}/{s}"))
            .chain(self.oidc.iter().filter(|s| *s != "offline_access").cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The resource `name` names in `directory`.
pub fn resource(directory: &Directory, name: &str) -> Result<Resource, Aadsts> {
    directory
        .resource(name)
        .or_else(|| directory.resource(name.trim_end_matches('/')))
        .map(|index| Resource {
            aud: name.trim_end_matches('/').to_owned(),
            index: Some(index),
        })
        .ok_or_else(|| Aadsts::UnknownResource {
            resource: name.to_owned(),
            tenant: directory.tenant_id.clone(),
        })
}

/// The resource of a client credentials `scope` (exactly one `{resource}/.default`).
pub fn client_credentials(directory: &Directory, scope: &str) -> Result<Resource, Aadsts> {
    let scope = scope.trim();
    match scope.strip_suffix("/.default") {
        Some(name) if !scope.contains(' ') => resource(directory, name),
        _ => Err(Aadsts::ClientCredentialsScope(scope.to_owned())),
    }
}

/// The scopes of a user sign-in.
pub fn delegated(directory: &Directory, scope: &str) -> Result<Delegated, Aadsts> {
    let mut oidc = Vec::new();
    let mut named: Option<(Resource, Vec<String>)> = None;
    for item in scope.split_whitespace() {
        if OIDC_SCOPES.contains(&item) {
            oidc.push(item.to_owned());
            continue;
        }
        let (name, value) = item
            .rsplit_once('/')
            .ok_or_else(|| Aadsts::InvalidScope(item.to_owned()))?;
        let found = resource(directory, name)?;
        let exposed = found
            .index
            .map(|i| directory.apps[i].app.scopes.clone())
            .unwrap_or_default();
        let values = match value {
            ".default" => exposed,
            _ if exposed.iter().any(|s| s == value) => vec![value.to_owned()],
            _ => return Err(Aadsts::InvalidScope(item.to_owned())),
        };
        match &mut named {
            None => named = Some((found, values)),
            Some((r, v)) if r.index == found.index => v.extend(values),
            // One resource per token: Entra refuses scopes of several (AADSTS28000).
            Some(_) => return Err(Aadsts::InvalidScope(item.to_owned())),
        }
    }
    let (resource, scp) = named.unwrap_or_else(|| {
        let graph = Resource {
            aud: GRAPH_APP_ID.to_owned(),
            index: None,
        };
        (graph, vec!["User.Read".to_owned()])
    });
    Ok(Delegated {
        resource,
        scp,
        oidc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{App, Config};

    fn directory() -> Directory {
        Directory::new(Config {
            apps: vec![
                App::new("api-id")
                    .app_id_uri("api://fleet")
                    .scope("Fleet.Read")
                    .scope("Fleet.Write"),
            ],
            ..Config::default()
        })
        .unwrap()
    }

    #[test]
    fn client_credentials_need_one_default_scope() {
        let dir = directory();
        assert_eq!(
            client_credentials(&dir, "api://fleet/.default").unwrap(),
            Resource {
                aud: "api://fleet".into(),
                index: Some(0)
            }
        );
        assert!(matches!(
            client_credentials(&dir, "api://fleet/Fleet.Read"),
            Err(Aadsts::ClientCredentialsScope(_))
        ));
        assert!(matches!(
            client_credentials(&dir, "https://vault.azure.net/.default"),
            Err(Aadsts::UnknownResource { .. })
        ));
    }

    #[test]
    fn delegated_scopes_name_one_resource_and_oidc() {
        let dir = directory();
        let d = delegated(&dir, "api://fleet/Fleet.Read openid offline_access").unwrap();
        assert_eq!(d.scp, ["Fleet.Read"]);
        assert!(d.openid() && d.offline_access());
        assert_eq!(d.granted(), "api://fleet/Fleet.Read openid");
        let all = delegated(&dir, "api-id/.default").unwrap();
        assert_eq!(all.scp, ["Fleet.Read", "Fleet.Write"]);
        assert_eq!(all.resource.aud, "api-id");
        assert!(matches!(
            delegated(&dir, "api://fleet/Fleet.Admin"),
            Err(Aadsts::InvalidScope(_))
        ));
        assert_eq!(
            delegated(&dir, "openid").unwrap().resource.aud,
            GRAPH_APP_ID
        );
    }
}

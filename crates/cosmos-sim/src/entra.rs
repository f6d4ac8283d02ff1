//! What an endpoint trusts of Microsoft Entra ID, as an account's settings say it: the issuer
//! and tenant whose tokens it takes, the audiences it accepts beyond its own, and the data-plane
//! role assignments (by principal object id) to the two built-in roles. The check of a request
//! against them is the server's (`server::auth`).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use oidc_verify::Verifier;

use crate::error::SimError;

/// The audience every account accepts: the scope SDKs fall back to is
/// `https://cosmos.azure.com/.default`.
pub const COSMOS_AUDIENCE: &str = "https://cosmos.azure.com";

/// The Entra ID tenant whose tokens an endpoint accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntraTrust {
    /// The issuer, exactly as tokens name it in `iss` (its OpenID discovery document is under
    /// it), e.g. `https://login.microsoftonline.com/{tenant}/v2.0` or entra-sim's `issuer()`.
    pub issuer: String,
    /// The tenant id tokens must carry in `tid`.
    pub tenant_id: String,
    /// Audiences accepted besides [`COSMOS_AUDIENCE`] and the endpoint's own URL (for one, the
    /// account URL `https://{account}.documents.azure.com` the endpoint stands in for).
    pub audiences: Vec<String>,
    /// A CA certificate (PEM) to trust for the issuer's HTTPS besides the platform's roots
    /// (a local issuer's own CA).
    pub ca_pem: Option<String>,
}

impl EntraTrust {
    /// Trusts `issuer`'s tokens for tenant `tenant_id`.
    pub fn new(issuer: impl Into<String>, tenant_id: impl Into<String>) -> EntraTrust {
        EntraTrust {
            issuer: issuer.into(),
            tenant_id: tenant_id.into(),
            audiences: Vec::new(),
            ca_pem: None,
        }
    }

    /// Trusts `pem` (a CA certificate) for the issuer's HTTPS.
    pub fn ca_pem(mut self, pem: impl Into<String>) -> EntraTrust {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Accepts tokens for `audience` too.
    pub fn audience(mut self, audience: impl Into<String>) -> EntraTrust {
        self.audiences.push(audience.into());
        self
    }
}

/// The built-in data-plane roles of Cosmos DB for NoSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataRole {
    /// "Cosmos DB Built-in Data Reader": metadata, point reads, queries, the change feed.
    Reader,
    /// "Cosmos DB Built-in Data Contributor": metadata and everything on items.
    Contributor,
}

impl DataRole {
    /// Both roles.
    pub const ALL: [DataRole; 2] = [DataRole::Reader, DataRole::Contributor];

    /// The role definition id (the same in every account).
    pub fn id(self) -> &'static str {
        match self {
            DataRole::Reader => "00000000-0000-0000-0000-000000000001",
            DataRole::Contributor => "00000000-0000-0000-0000-000000000002",
        }
    }

    /// The role's name.
    pub fn name(self) -> &'static str {
        match self {
            DataRole::Reader => "Cosmos DB Built-in Data Reader",
            DataRole::Contributor => "Cosmos DB Built-in Data Contributor",
        }
    }

    /// The short name a command line takes: `reader` or `contributor`.
    fn short(self) -> &'static str {
        match self {
            DataRole::Reader => "reader",
            DataRole::Contributor => "contributor",
        }
    }
}

impl fmt::Display for DataRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DataRole {
    type Err = String;

    /// By short name (`reader`, `contributor`, any case), full name or definition id.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DataRole::ALL
            .into_iter()
            .find(|r| r.short().eq_ignore_ascii_case(s) || r.name() == s || r.id() == s)
            .ok_or_else(|| {
                format!(
                    "'{s}' is not a built-in data role: reader ({}) or contributor ({})",
                    DataRole::Reader.id(),
                    DataRole::Contributor.id()
                )
            })
    }
}

/// A running endpoint's Entra trust: the verifier of the issuer's tokens, the tenant and the
/// role assignments.
#[derive(Debug)]
pub(crate) struct EntraAccess {
    pub verifier: Verifier,
    pub tenant_id: String,
    assignments: parking_lot::RwLock<HashMap<String, DataRole>>,
    /// How far the endpoint's clock, which token times are held to, runs ahead (seconds).
    clock_ahead_secs: AtomicU64,
}

impl EntraAccess {
    /// Reads the issuer's discovery document and keys; tokens may be for
    /// [`COSMOS_AUDIENCE`], the endpoint's own URL `endpoint` or the trust's audiences.
    pub(crate) async fn start(
        trust: EntraTrust,
        endpoint: &str,
        assignments: HashMap<String, DataRole>,
    ) -> Result<EntraAccess, SimError> {
        let own = endpoint.trim_end_matches('/');
        let mut audiences = vec![
            COSMOS_AUDIENCE.to_string(),
            own.to_string(),
            format!("{own}/"),
        ];
        audiences.extend(trust.audiences);
        let verifier = Verifier::discover(trust.issuer, audiences, trust.ca_pem.as_deref()).await?;
        Ok(EntraAccess {
            verifier,
            tenant_id: trust.tenant_id,
            assignments: parking_lot::RwLock::new(assignments),
            clock_ahead_secs: AtomicU64::new(0),
        })
    }

    /// The role assigned to principal `oid`.
    pub(crate) fn role_of(&self, oid: &str) -> Option<DataRole> {
        self.assignments.read().get(oid).copied()
    }

    #[cfg(feature = "test-support")]
    /// Assigns `role` to principal `oid`, or removes its assignment.
    pub(crate) fn assign(&self, oid: &str, role: Option<DataRole>) {
        let mut assignments = self.assignments.write();
        match role {
            Some(role) => assignments.insert(oid.to_owned(), role),
            None => assignments.remove(oid),
        };
    }

    /// The endpoint's time, which token times are held to.
    pub(crate) fn now(&self) -> SystemTime {
        SystemTime::now() + Duration::from_secs(self.clock_ahead_secs.load(Ordering::Relaxed))
    }

    #[cfg(feature = "test-support")]
    /// Sets the endpoint's clock `ahead` of this host's.
    pub(crate) fn set_clock_ahead(&self, ahead: Duration) {
        self.clock_ahead_secs
            .store(ahead.as_secs(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_by_short_name_full_name_and_definition_id() {
        assert_eq!("Reader".parse(), Ok(DataRole::Reader));
        assert_eq!(
            "Cosmos DB Built-in Data Contributor".parse(),
            Ok(DataRole::Contributor)
        );
        assert_eq!(
            "00000000-0000-0000-0000-000000000001".parse(),
            Ok(DataRole::Reader)
        );
        assert!("owner".parse::<DataRole>().is_err());
    }
}

//! The built-in endpoint playing an Event Hubs namespace that takes Microsoft Entra ID: a
//! `put-token` of type `jwt` is checked as the service checks it (signature, issuer and
//! times through `oidc-verify`; audience `https://eventhubs.azure.net`; the tenant), and the
//! token's principal (`oid`) must hold an Azure role that may receive. With local
//! authentication disabled, shared access signatures are refused in the service's words.

use std::collections::HashMap;

use oidc_verify::Verifier;
use parking_lot::RwLock;
use serde::Deserialize;

/// The audience of Event Hubs tokens (the scope SDKs ask for is `{this}/.default`).
pub const EVENTHUBS_AUDIENCE: &str = "https://eventhubs.azure.net";

/// What the service answers a shared access signature when local authentication is off.
pub(crate) const LOCAL_AUTH_DISABLED: &str = "LocalAuthDisabled: Authorization failed because SAS authentication has been disabled for the namespace.";

/// The built-in Azure roles of Event Hubs data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventHubsRole {
    /// "Azure Event Hubs Data Receiver" (a638d3c7-ab3a-418d-83e6-5f17a39d4fde): receive.
    Receiver,
    /// "Azure Event Hubs Data Sender" (2b629674-e913-4c01-ae53-ef4638d8f975): send only.
    Sender,
    /// "Azure Event Hubs Data Owner" (f526a384-b230-433a-b45c-95f59c4a2dec): everything.
    Owner,
}

impl EventHubsRole {
    /// Whether the role may receive events.
    fn may_receive(self) -> bool {
        matches!(self, EventHubsRole::Receiver | EventHubsRole::Owner)
    }
}

/// Whose Entra ID tokens the endpoint takes.
#[derive(Debug, Clone, Default)]
pub struct EntraTrust {
    /// The issuer, as tokens name it in `iss` (its discovery document is under it).
    pub issuer: String,
    /// The tenant tokens must carry in `tid`.
    pub tenant_id: String,
    /// A CA (PEM) to trust for the issuer's HTTPS besides the platform's roots.
    pub ca_pem: Option<String>,
    /// Role assignments by principal object id.
    pub roles: HashMap<String, EventHubsRole>,
    /// Whether shared access signatures are still taken (`disableLocalAuth` off).
    pub local_auth: bool,
}

/// A running endpoint's Entra trust.
pub(crate) struct EntraAccess {
    verifier: Verifier,
    tenant_id: String,
    roles: RwLock<HashMap<String, EventHubsRole>>,
    pub(crate) local_auth: bool,
}

#[derive(Deserialize)]
struct Claims {
    tid: Option<String>,
    oid: Option<String>,
}

/// The `exp` of a token that passed the check (`oidc-verify` keeps the times to itself).
fn expiry(token: &str) -> Option<u64> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice::<serde_json::Value>(&bytes).ok()?["exp"].as_u64()
}

impl EntraAccess {
    /// Reads the issuer's discovery document and keys.
    pub(crate) async fn start(
        trust: EntraTrust,
    ) -> Result<EntraAccess, oidc_verify::DiscoveryError> {
        let audiences = vec![
            EVENTHUBS_AUDIENCE.to_string(),
            format!("{EVENTHUBS_AUDIENCE}/"),
        ];
        let verifier = Verifier::discover(trust.issuer, audiences, trust.ca_pem.as_deref()).await?;
        Ok(EntraAccess {
            verifier,
            tenant_id: trust.tenant_id,
            roles: RwLock::new(trust.roles),
            local_auth: trust.local_auth,
        })
    }

    /// Assigns `role` to principal `oid`, or removes its assignment.
    #[cfg(feature = "test-support")]
    pub(crate) fn assign(&self, oid: &str, role: Option<EventHubsRole>) {
        let mut roles = self.roles.write();
        match role {
            Some(role) => roles.insert(oid.to_owned(), role),
            None => roles.remove(oid),
        };
    }

    /// Checks a JWT put on `$cbs` for receiving from `hub`; its expiry, or why it is refused.
    pub(crate) async fn check(&self, token: &str, hub: &str) -> Result<u64, String> {
        let claims: Claims = self
            .verifier
            .verify(token)
            .await
            .map_err(|refusal| format!("InvalidIssuer: Token is not valid: {refusal}"))?;
        if claims.tid.as_deref() != Some(self.tenant_id.as_str()) {
            return Err(format!(
                "InvalidIssuer: Token issuer is invalid: the token is of tenant {:?}, this namespace's is {}",
                claims.tid.unwrap_or_default(),
                self.tenant_id
            ));
        }
        let oid = claims.oid.unwrap_or_default();
        match self.roles.read().get(&oid) {
            Some(role) if role.may_receive() => {
                expiry(token).ok_or_else(|| "the token has no exp".to_string())
            }
            _ => Err(format!(
                "Unauthorized access. 'Listen' claim(s) are required to perform this operation. Resource: 'sb://{hub}'. (principal {oid}: assign it \"Azure Event Hubs Data Receiver\")"
            )),
        }
    }
}

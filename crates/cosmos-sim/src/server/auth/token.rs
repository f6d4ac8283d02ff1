//! An Entra ID token's check: signature, issuer, audience and times (`oidc-verify`), the
//! tenant (`tid`), and the principal (`oid`) with the data role assigned to it. Refusals are
//! 401s in the service's words where Microsoft publishes them (an expired token, another
//! audience), in words of the same shape otherwise.

use super::ACCOUNT;
use crate::endpoint_state::EndpointState;
use crate::entra::DataRole;
use crate::server::reply::Reply;
use chrono::DateTime;
use oidc_verify::Refusal;
use serde::Deserialize;

/// A token's principal and the role assigned to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal {
    /// The object id (`oid`).
    pub oid: String,
    /// Its role assignment, if any.
    pub role: Option<DataRole>,
}

/// The claims the endpoint reads.
#[derive(Deserialize)]
struct Claims {
    oid: Option<String>,
    tid: Option<String>,
}

/// Checks `token` against the endpoint's Entra trust.
pub(super) async fn check(state: &EndpointState, token: &str) -> Result<Principal, Reply> {
    let Some(entra) = &state.entra else {
        return Err(blocked(
            0,
            "This endpoint trusts no Entra ID issuer (start it with an Entra trust: --entra-issuer and --entra-tenant); sign with the key instead.",
        ));
    };
    let claims: Claims = entra
        .verifier
        .verify_at(token, entra.now())
        .await
        .map_err(|r| refusal(&r))?;
    let tid = claims.tid.unwrap_or_default();
    if tid != entra.tenant_id {
        return Err(blocked(
            0,
            format!(
                "Provided AAD token is issued by tenant [{tid}]. This database account accepts tokens of tenant [{}].",
                entra.tenant_id
            ),
        ));
    }
    let oid = claims
        .oid
        .ok_or_else(|| blocked(0, "Provided AAD token has no principal object id (oid)."))?;
    Ok(Principal {
        role: entra.role_of(&oid),
        oid,
    })
}

/// A 401 "Request blocked by Auth" with `message`.
fn blocked(substatus: u32, message: impl std::fmt::Display) -> Reply {
    Reply::error(
        401,
        substatus,
        format!("Request blocked by Auth {ACCOUNT} : {message}"),
    )
}

/// The service's words for a refused token.
fn refusal(refusal: &Refusal) -> Reply {
    match refusal {
        // The service's message for an expired token (its times as .NET prints them).
        Refusal::Expired { exp, now } => blocked(
            0,
            format!(
                "Provided AAD token has been expired since [{} (UTC)]. Current server time is [{} (UTC)]. Please refresh the AAD token.",
                dotnet_time(*exp),
                dotnet_time(*now)
            ),
        ),
        // The service's message for a token of another audience (401, substatus 5008).
        Refusal::Audience { found, accepted } => blocked(
            5008,
            format!(
                "Provided AAD token is intended for [{}]. This database account accepts tokens intended for [{}].",
                found.join(", "),
                accepted.join(", ")
            ),
        ),
        other => blocked(0, format!("Provided AAD token is not valid: {other}.")),
    }
}

/// Seconds since the epoch as .NET's invariant `M/d/yyyy h:mm:ss tt`.
fn dotnet_time(secs: u64) -> String {
    DateTime::from_timestamp(i64::try_from(secs).unwrap_or(i64::MAX), 0)
        .map(|t| t.format("%-m/%-d/%Y %-I:%M:%S %p").to_string())
        .unwrap_or_else(|| secs.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_the_service_prints_them() {
        // 2025-01-30T10:38:31Z and 14:47:35Z, as in a refusal the service sent:
        // "expired since [1/30/2025 10:38:31 AM (UTC)]. Current server time is [1/30/2025 2:47:35 PM (UTC)]".
        assert_eq!(dotnet_time(1_738_233_511), "1/30/2025 10:38:31 AM");
        assert_eq!(dotnet_time(1_738_248_455), "1/30/2025 2:47:35 PM");
    }
}

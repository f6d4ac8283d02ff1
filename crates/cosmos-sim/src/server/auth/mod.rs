//! Who a request is from and what it may do: a master-key signature (unless local
//! authentication is disabled), or a Microsoft Entra ID token (when the endpoint trusts an
//! issuer) whose principal's data-plane role must allow the operation. Refusals are in the
//! service's words where Microsoft publishes them.

mod key;
mod rbac;
mod token;

pub(super) use rbac::{DataAction, Need};

use super::headers::header;
use super::reply::Reply;
use crate::endpoint_state::EndpointState;
use cosmos_wire::auth::AuthorizationHeader;
use http::{HeaderMap, Method};

/// The account name in the service's "Request blocked by Auth {account}" refusals (the id
/// `GET /` answers).
const ACCOUNT: &str = "cosmos-sim";

/// Who sent a request whose credential was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Caller {
    /// The account key: everything.
    Key,
    /// An Entra ID token's principal (`oid`), as far as its role allows.
    Principal(token::Principal),
}

/// Checks the request's credential.
pub(super) async fn authenticate(
    state: &EndpointState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<Caller, Reply> {
    let Some(raw) = header(headers, "authorization") else {
        return Err(Reply::error(
            401,
            0,
            "Required Header authorization is missing. Ensure a valid Authorization token is passed.",
        ));
    };
    let auth = AuthorizationHeader::parse(raw)
        .map_err(|e| Reply::error(401, 0, format!("The authorization header is invalid: {e}")))?;
    match auth.kind.as_str() {
        "master" if !state.local_auth => Err(Reply::error(
            401,
            0,
            "Local Authorization is disabled. Use an AAD token to authorize all requests.",
        )),
        "master" => key::check(state, method, path, headers, &auth.signature).map(|()| Caller::Key),
        "aad" => token::check(state, &auth.signature)
            .await
            .map(Caller::Principal),
        other => Err(Reply::error(
            401,
            0,
            format!(
                "Authorization of type {other:?} is not supported here; sign with the master key or send an AAD token."
            ),
        )),
    }
}

/// Whether `caller` may do what `need` asks on `path` (a batch's operations are in `body`).
pub(super) fn authorize(
    caller: &Caller,
    need: Need,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Result<(), Reply> {
    match caller {
        Caller::Key => Ok(()),
        Caller::Principal(principal) => rbac::authorize(principal, need, method, path, body),
    }
}

//! The claims of the tokens the issuer signs, in Entra's v2.0 shape or, for a resource that
//! takes them, its v1.0 shape (the access token claims reference and the ID token claims
//! reference on learn.microsoft.com): who the token is about ([`Subject`]: an app, a
//! managed identity, or a user signed in to a client), which resource it is for and under
//! what name (`aud`), and how long it lives.

use crate::config::TokenVersion;
use crate::directory::{AppEntry, Directory, IdentityEntry, Roles, UserEntry};
use crate::keys::new_opaque;
use aws_lc_rs::digest::{SHA256, digest};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Map, Value, json};
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

/// Microsoft Graph's app id: the audience of a sign-in that asked for no API.
pub const GRAPH_APP_ID: &str = "00000003-0000-0000-c000-000000000000";

/// How the client proved who it is (the `azpacr` claim).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A public client: no credential (`0`).
    Public,
    /// A client secret (`1`).
    Secret,
    /// A client assertion signed with a certificate's key, or a managed identity (`2`).
    Certificate,
}

impl ClientAuth {
    fn azpacr(self) -> &'static str {
        match self {
            ClientAuth::Public => "0",
            ClientAuth::Secret => "1",
            ClientAuth::Certificate => "2",
        }
    }
}

/// Whom a token speaks for.
pub enum Subject<'a> {
    /// An app's service principal (client credentials).
    App(&'a AppEntry, ClientAuth),
    /// A managed identity.
    Identity(&'a IdentityEntry),
    /// A user, signed in to `client` (delegated).
    User {
        /// The user.
        user: &'a UserEntry,
        /// The client the user signed in to.
        client: &'a AppEntry,
        /// How the client authenticated.
        auth: ClientAuth,
    },
}

/// What a token is for.
pub struct Audience<'a> {
    /// `aud`: the resource as the request named it (app id URI or client id).
    pub aud: &'a str,
    /// The resource's index in the directory (`None`: Microsoft Graph, which is not in it).
    pub resource: Option<usize>,
    /// Delegated scope values (`scp`), for user tokens.
    pub scp: Vec<String>,
    /// The token shape the resource takes.
    pub version: TokenVersion,
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// A user's `sub`: pairwise, the same for one user and one client, different across clients.
fn pairwise_sub(user: &UserEntry, client: &AppEntry) -> String {
    let input = format!("{}|{}", user.user.object_id, client.app.client_id);
    B64.encode(digest(&SHA256, input.as_bytes()))
}

/// When a token is valid: issued at (`iat`, `nbf`), for `lifetime` seconds (`exp`).
#[derive(Debug, Clone, Copy)]
pub struct Validity {
    /// Seconds since the Unix epoch, by the issuer's clock.
    pub issued_at: u64,
    /// Seconds.
    pub lifetime: u64,
}

impl Validity {
    /// A token issued now, by the clock of `directory`'s issuer.
    pub fn now_by(directory: &Directory) -> Validity {
        let behind = directory.clock_behind_secs.load(Ordering::Relaxed);
        Validity {
            issued_at: now().saturating_sub(behind),
            lifetime: directory.token_lifetime_secs,
        }
    }
}

/// The issuer of v1.0 tokens of tenant `tid`, whatever the authority that signs them.
pub fn v1_issuer(tid: &str) -> String {
    format!("https://sts.windows.net/{tid}/")
}

fn common(
    issuer: &str,
    tid: &str,
    aud: &str,
    validity: Validity,
    version: TokenVersion,
) -> Map<String, Value> {
    let (iat, lifetime) = (validity.issued_at, validity.lifetime);
    let mut claims = Map::new();
    claims.insert("aud".into(), aud.into());
    let (issuer, ver) = match version {
        TokenVersion::V1 => (v1_issuer(tid), "1.0"),
        TokenVersion::V2 => (issuer.to_owned(), "2.0"),
    };
    claims.insert("iss".into(), issuer.into());
    claims.insert("iat".into(), iat.into());
    claims.insert("nbf".into(), iat.into());
    claims.insert("exp".into(), (iat + lifetime).into());
    claims.insert("tid".into(), tid.into());
    claims.insert("ver".into(), ver.into());
    claims
}

fn roles_on(roles: &Roles, resource: Option<usize>) -> Vec<String> {
    resource
        .and_then(|r| roles.get(&r))
        .cloned()
        .unwrap_or_default()
}

/// The claims of an access token for `subject` to call `audience`, in the shape its
/// resource takes: v1.0 names the client `appid` and the user `upn`, v2.0 `azp` and
/// `preferred_username`.
pub fn access_claims(
    issuer: &str,
    tid: &str,
    validity: Validity,
    subject: &Subject<'_>,
    audience: &Audience<'_>,
) -> Value {
    let v1 = audience.version == TokenVersion::V1;
    let mut claims = common(issuer, tid, audience.aud, validity, audience.version);
    claims.insert("uti".into(), new_opaque()[..22].into());
    let (azp, acr, oid, sub, roles) = match subject {
        Subject::App(app, auth) => (
            &app.app.client_id,
            *auth,
            &app.app.object_id,
            app.app.object_id.clone(),
            roles_on(&app.roles, audience.resource),
        ),
        Subject::Identity(identity) => (
            &identity.identity.client_id,
            ClientAuth::Certificate,
            &identity.identity.object_id,
            identity.identity.object_id.clone(),
            roles_on(&identity.roles, audience.resource),
        ),
        Subject::User { user, client, auth } => {
            claims.insert("name".into(), user.user.name.clone().into());
            let names: &[&str] = if v1 {
                &["upn", "unique_name"]
            } else {
                &["preferred_username"]
            };
            for name in names {
                claims.insert((*name).into(), user.user.username.clone().into());
            }
            claims.insert("scp".into(), audience.scp.join(" ").into());
            (
                &client.app.client_id,
                *auth,
                &user.user.object_id,
                pairwise_sub(user, client),
                roles_on(&user.roles, audience.resource),
            )
        }
    };
    if !matches!(subject, Subject::User { .. }) {
        claims.insert("idtyp".into(), "app".into());
    }
    let (azp_name, acr_name) = if v1 {
        ("appid", "appidacr")
    } else {
        ("azp", "azpacr")
    };
    claims.insert(azp_name.into(), azp.clone().into());
    claims.insert(acr_name.into(), acr.azpacr().into());
    claims.insert("oid".into(), oid.clone().into());
    claims.insert("sub".into(), sub.into());
    if !roles.is_empty() {
        claims.insert("roles".into(), json!(roles));
    }
    Value::Object(claims)
}

/// The claims of an ID token for `user` signed in to `client`, echoing `nonce`.
pub fn id_claims(
    issuer: &str,
    tid: &str,
    validity: Validity,
    user: &UserEntry,
    client: &AppEntry,
    nonce: Option<&str>,
) -> Value {
    let mut claims = common(
        issuer,
        tid,
        &client.app.client_id,
        validity,
        TokenVersion::V2,
    );
    claims.insert("sub".into(), pairwise_sub(user, client).into());
    claims.insert("oid".into(), user.user.object_id.clone().into());
    claims.insert("name".into(), user.user.name.clone().into());
    claims.insert(
        "preferred_username".into(),
        user.user.username.clone().into(),
    );
    if let Some(nonce) = nonce {
        claims.insert("nonce".into(), nonce.into());
    }
    Value::Object(claims)
}

/// `client_info` of a user's token response (base64url JSON of `uid` and `utid`), from which
/// MSAL makes the account's home id.
pub fn client_info(user: &UserEntry, tid: &str) -> String {
    B64.encode(json!({"uid": user.user.object_id, "utid": tid}).to_string())
}

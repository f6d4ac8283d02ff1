//! Who may see the fleet: the credential a request carries (an API key in `X-API-Key`, or an
//! OIDC bearer token in `Authorization`), the roles it grants, and the guard with which each
//! route declares the role it needs ([`guarded`]).
//!
//! `Fleet.Read` reads positions, tracks and the map; `Fleet.Admin` may also change things
//! (a route that writes declares `Role::Admin`). A request without a credential is
//! anonymous: it may read only when the configuration allows anonymous access, and is
//! refused otherwise. A missing or bad credential is a 401, a missing role a 403, each with a
//! JSON body; a bad credential is refused even where anonymous access is allowed.

mod keys;
mod oidc;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use serde_json::json;

use keys::KeySet;
pub use keys::{ApiKeys, KeyError, key_line};
pub use oidc::{Oidc, OidcError, OidcSettings};

/// The header that carries an API key.
pub const API_KEY_HEADER: &str = "x-api-key";

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Read positions, tracks and the map (`Fleet.Read`).
    Read,
    /// Everything, including what writes (`Fleet.Admin`).
    Admin,
}

impl Role {
    /// The role's name, as in a key file and a token's `roles` claim.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "Fleet.Read",
            Role::Admin => "Fleet.Admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Role::Read, Role::Admin]
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| format!("'{s}' is not a role: Fleet.Read or Fleet.Admin"))
    }
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// An API key, by its name in the key file.
    Key(String),
    /// A bearer token, by its subject (`sub`).
    Token(String),
    /// No credential, where anonymous access is allowed.
    Anonymous,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Key(name) => write!(f, "key:{name}"),
            Identity::Token(subject) => write!(f, "token:{subject}"),
            Identity::Anonymous => f.write_str("anonymous"),
        }
    }
}

/// A caller let in: who, and the roles held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Who.
    pub identity: Identity,
    /// The roles held.
    pub roles: Vec<Role>,
}

impl Caller {
    /// Whether the caller may do what `role` allows (`Fleet.Admin` may also read).
    pub fn may(&self, role: Role) -> bool {
        self.roles.contains(&role) || self.roles.contains(&Role::Admin)
    }

    /// The name of the most the caller may do: `Fleet.Admin`, `Fleet.Read`, or `none`.
    pub fn role_name(&self) -> &'static str {
        [Role::Admin, Role::Read]
            .into_iter()
            .find(|r| self.may(*r))
            .map_or("none", Role::name)
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credential where one is needed, or a bad one: 401.
    Unauthenticated(String),
    /// A good credential without the role the route needs: 403.
    Forbidden(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            Refusal::Unauthenticated(m) => (StatusCode::UNAUTHORIZED, "unauthorized", m),
            Refusal::Forbidden(m) => (StatusCode::FORBIDDEN, "forbidden", m),
        };
        let mut response = (
            status,
            axum::Json(json!({"error": code, "message": message})),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            // RFC 6750: the scheme the caller may retry with.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// How callers are let in, as configured.
#[derive(Debug, Clone, Default)]
pub struct AccessConfig {
    /// The accepted API keys (none: keys are refused).
    pub keys: ApiKeys,
    /// The issuer whose bearer tokens are accepted (none: tokens are refused).
    pub oidc: Option<OidcSettings>,
    /// Whether a request without a credential may read.
    pub anonymous: bool,
}

/// The running access rules, shared by every route's guard.
#[derive(Debug, Clone)]
pub struct Access {
    keys: Arc<KeySet>,
    oidc: Option<Arc<Oidc>>,
    anonymous: bool,
}

impl Access {
    /// Lets every caller read without a credential, and takes none (the demo's rule).
    pub fn anonymous() -> Access {
        Access {
            keys: Arc::new(KeySet::new(ApiKeys::default())),
            oidc: None,
            anonymous: true,
        }
    }

    /// The rules of `config`; with an issuer, after reading its discovery document and
    /// signing keys.
    pub async fn start(config: AccessConfig) -> Result<Access, OidcError> {
        let oidc = match config.oidc {
            Some(settings) => Some(Arc::new(Oidc::discover(settings).await?)),
            None => None,
        };
        Ok(Access {
            keys: Arc::new(KeySet::new(config.keys)),
            oidc,
            anonymous: config.anonymous,
        })
    }

    /// The count of API key file versions that did not load (the last good keys stayed in
    /// service); none when the keys were not read from a file.
    pub fn key_file_failures(&self) -> Option<prometheus_client::metrics::counter::Counter> {
        self.keys.failures()
    }

    /// Who sent `headers`, and with what roles. One credential a request: an API key or a
    /// bearer token.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        let unauthenticated = |m: &str| Refusal::Unauthenticated(m.to_string());
        match (
            headers.get(API_KEY_HEADER),
            headers.get(header::AUTHORIZATION),
        ) {
            (Some(_), Some(_)) => Err(unauthenticated(
                "two credentials: send either X-API-Key or Authorization",
            )),
            (Some(value), None) => {
                // The key file's newest version (a `stat` of the file when it has one).
                let keys = self.keys.current();
                if keys.is_empty() {
                    return Err(unauthenticated("this API takes no API keys"));
                }
                let holder = value
                    .to_str()
                    .ok()
                    .and_then(|key| keys.find(key))
                    .ok_or_else(|| unauthenticated("the API key is not one of the keys"))?;
                Ok(Caller {
                    identity: Identity::Key(holder.name.clone()),
                    roles: vec![holder.role],
                })
            }
            (None, Some(value)) => {
                let Some(oidc) = &self.oidc else {
                    return Err(unauthenticated("this API takes no bearer tokens"));
                };
                let token = value
                    .to_str()
                    .ok()
                    .and_then(|v| v.split_once(' '))
                    .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                    .map(|(_, token)| token.trim())
                    .ok_or_else(|| unauthenticated("Authorization is not 'Bearer TOKEN'"))?;
                let verified = oidc.verify(token).await.map_err(Refusal::Unauthenticated)?;
                Ok(Caller {
                    identity: Identity::Token(verified.subject),
                    roles: verified.roles,
                })
            }
            (None, None) if self.anonymous => Ok(Caller {
                identity: Identity::Anonymous,
                roles: vec![Role::Read],
            }),
            (None, None) => Err(unauthenticated(
                "no credential: send X-API-Key or Authorization: Bearer",
            )),
        }
    }
}

/// `route`, answered only to callers that hold `role`: the one place a route declares its
/// role. The caller let in is put in the request's extensions, and the caller known (let in
/// or refused for its role) in the answer's, for the audit.
pub fn guarded<S>(access: &Access, role: Role, route: MethodRouter<S>) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    route.route_layer(axum::middleware::from_fn_with_state(
        (access.clone(), role),
        check,
    ))
}

async fn check(
    State((access, role)): State<(Access, Role)>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = match access.authenticate(request.headers()).await {
        Ok(caller) => caller,
        Err(refusal) => return refusal.into_response(),
    };
    let mut response = if caller.may(role) {
        request.extensions_mut().insert(caller.clone());
        next.run(request).await
    } else {
        Refusal::Forbidden(format!("{} does not hold {role}", caller.identity)).into_response()
    };
    response.extensions_mut().insert(caller);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::{get, post};
    use tower::ServiceExt as _;

    /// SHA-256 of "abc" (FIPS 180-2) and of "abd" (sha256sum).
    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    const ABD: &str = "a52d159f262b2c6ddb724a61840befc36eb30c88877a4030b65cbe86298449c9";

    async fn access(anonymous: bool) -> Access {
        Access::start(AccessConfig {
            keys: ApiKeys::parse(&format!("reader Fleet.Read {ABC}\nops Fleet.Admin {ABD}"))
                .unwrap(),
            oidc: None,
            anonymous,
        })
        .await
        .unwrap()
    }

    /// A router with a read route and a writing route, as the API declares them.
    fn app(access: &Access) -> Router {
        Router::new()
            .route(
                "/read",
                guarded(access, Role::Read, get(|| async { "read" })),
            )
            .route(
                "/write",
                guarded(access, Role::Admin, post(|| async { "written" })),
            )
    }

    async fn status(app: &Router, method: &str, uri: &str, key: Option<&str>) -> u16 {
        with_headers(app, method, uri, key.map(|k| (API_KEY_HEADER, k))).await
    }

    async fn with_headers(
        app: &Router,
        method: &str,
        uri: &str,
        headers: impl IntoIterator<Item = (&str, &str)>,
    ) -> u16 {
        let mut request = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        response.status().as_u16()
    }

    #[tokio::test]
    async fn each_route_needs_its_role() {
        let app = app(&access(false).await);
        assert_eq!(status(&app, "GET", "/read", None).await, 401);
        assert_eq!(status(&app, "GET", "/read", Some("abx")).await, 401);
        assert_eq!(status(&app, "GET", "/read", Some("abc")).await, 200);
        assert_eq!(status(&app, "POST", "/write", Some("abc")).await, 403);
        let request = Request::post("/write").header(API_KEY_HEADER, "abc");
        let refused = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let known = refused.extensions().get::<Caller>().map(|c| &c.identity);
        assert_eq!(
            known,
            Some(&Identity::Key("reader".into())),
            "for the audit"
        );
        assert_eq!(status(&app, "POST", "/write", Some("abd")).await, 200);
        assert_eq!(status(&app, "GET", "/read", Some("abd")).await, 200);
    }

    #[tokio::test]
    async fn anonymous_callers_read_only_where_allowed_and_bad_keys_stay_refused() {
        let app = app(&access(true).await);
        assert_eq!(status(&app, "GET", "/read", None).await, 200);
        assert_eq!(status(&app, "POST", "/write", None).await, 403);
        assert_eq!(status(&app, "GET", "/read", Some("abx")).await, 401);
    }

    #[tokio::test]
    async fn bearer_tokens_without_an_issuer_and_two_credentials_are_refused() {
        let app = app(&access(true).await);
        let bearer = ("authorization", "Bearer e30.e30.e30");
        assert_eq!(with_headers(&app, "GET", "/read", [bearer]).await, 401);
        let both = [(API_KEY_HEADER, "abc"), bearer];
        assert_eq!(with_headers(&app, "GET", "/read", both).await, 401);
    }

    #[test]
    fn the_role_named_is_the_most_a_caller_may_do() {
        let caller = |roles: Vec<Role>| Caller {
            identity: Identity::Anonymous,
            roles,
        };
        assert_eq!(
            caller(vec![Role::Read, Role::Admin]).role_name(),
            "Fleet.Admin"
        );
        assert_eq!(caller(vec![Role::Read]).role_name(), "Fleet.Read");
        assert_eq!(caller(vec![]).role_name(), "none");
    }

    #[test]
    fn roles_parse_by_their_names() {
        assert_eq!("Fleet.Read".parse::<Role>(), Ok(Role::Read));
        assert_eq!("Fleet.Admin".parse::<Role>(), Ok(Role::Admin));
        assert!("fleet.read".parse::<Role>().is_err());
    }
}

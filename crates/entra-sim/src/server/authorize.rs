//! `GET /{tenant}/oauth2/v2.0/authorize`: the authorization code flow's first leg. A test
//! stand-in signs in without a form: the user `login_hint` names, or the first configured
//! user. What Entra shows as an error page (unknown client, unregistered redirect URI) is a
//! 400 here; what it sends back to the app (missing PKCE, bad scope, unknown user) goes to
//! the redirect URI as `error`, `error_description` and `state`.

use super::grants::CodeGrant;
use super::{Issuer, scopes};
use crate::aadsts::Aadsts;
use crate::directory::AppEntry;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use std::sync::Arc;
use url::Url;

/// The query parameters the endpoint reads.
#[derive(Debug, Deserialize)]
pub struct AuthorizeQuery {
    client_id: Option<String>,
    response_type: Option<String>,
    redirect_uri: Option<String>,
    response_mode: Option<String>,
    scope: Option<String>,
    state: Option<String>,
    nonce: Option<String>,
    code_challenge: Option<String>,
    code_challenge_method: Option<String>,
    login_hint: Option<String>,
}

/// Where the answer goes back to the app: in the query or in the fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResponseMode {
    Query,
    Fragment,
}

/// Whether `asked` matches `registered`: exactly, except that for `http://localhost` and
/// `http://127.0.0.1` the port is not compared (as Entra treats loopback redirect URIs).
fn redirect_matches(registered: &str, asked: &str) -> bool {
    if registered == asked {
        return true;
    }
    let (Ok(mut r), Ok(mut a)) = (Url::parse(registered), Url::parse(asked)) else {
        return false;
    };
    let loopback = matches!(r.host_str(), Some("localhost" | "127.0.0.1"));
    if !(loopback && r.scheme() == "http") {
        return false;
    }
    let _ = (r.set_port(None), a.set_port(None));
    r == a
}

/// The endpoint.
pub async fn authorize(
    State(issuer): State<Arc<Issuer>>,
    Path(tenant): Path<String>,
    Query(query): Query<AuthorizeQuery>,
) -> Response {
    if let Err(e) = issuer.check_tenant(&tenant) {
        return e.into_response();
    }
    let client_id = query.client_id.clone().unwrap_or_default();
    let Some(app) = issuer.directory.app(&client_id) else {
        return Aadsts::UnknownClient {
            client_id,
            tenant: issuer.directory.tenant_id.clone(),
        }
        .into_response();
    };
    let redirect_uri = query.redirect_uri.clone().unwrap_or_default();
    if !app
        .app
        .redirect_uris
        .iter()
        .any(|r| redirect_matches(r, &redirect_uri))
    {
        return Aadsts::RedirectNotRegistered {
            redirect_uri,
            client_id,
        }
        .into_response();
    }
    let mode = match query.response_mode.as_deref() {
        Some("fragment") => ResponseMode::Fragment,
        _ => ResponseMode::Query,
    };
    let answer = match sign_in(&issuer, app, &query, &redirect_uri) {
        Ok(code) => vec![("code", code)],
        Err(e) => vec![
            ("error", e.error().as_str().to_owned()),
            ("error_description", e.description()),
        ],
    };
    let mut pairs = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in &answer {
        pairs.append_pair(k, v);
    }
    if let Some(state) = &query.state {
        pairs.append_pair("state", state);
    }
    let params = pairs.finish();
    let location = match (mode, redirect_uri.contains('?')) {
        (ResponseMode::Fragment, _) => format!("{redirect_uri}#{params}"),
        (ResponseMode::Query, true) => format!("{redirect_uri}&{params}"),
        (ResponseMode::Query, false) => format!("{redirect_uri}?{params}"),
    };
    Redirect::to(&location).into_response()
}

/// Signs the configured user in and issues a code, or says why not.
fn sign_in(
    issuer: &Issuer,
    app: &AppEntry,
    query: &AuthorizeQuery,
    redirect_uri: &str,
) -> Result<String, Aadsts> {
    match query.response_type.as_deref() {
        Some("code") => {}
        Some(other) => return Err(Aadsts::UnsupportedResponseType(other.to_owned())),
        None => return Err(Aadsts::MissingParameter("response_type")),
    }
    let challenge = match (
        &query.code_challenge,
        query.code_challenge_method.as_deref(),
    ) {
        (Some(challenge), Some("S256")) if !challenge.is_empty() => challenge.clone(),
        _ => return Err(Aadsts::PkceRequired),
    };
    let scope = query
        .scope
        .as_deref()
        .ok_or(Aadsts::MissingParameter("scope"))?;
    scopes::delegated(&issuer.directory, scope)?;
    let hint = query.login_hint.as_deref();
    let user = issuer
        .directory
        .user(hint)
        .ok_or_else(|| Aadsts::UnknownUser {
            user: hint.unwrap_or("(none)").to_owned(),
            tenant: issuer.directory.tenant_id.clone(),
        })?;
    Ok(issuer.grants().issue_code(CodeGrant {
        client_id: app.app.client_id.clone(),
        redirect_uri: redirect_uri.to_owned(),
        scopes: scope.split_whitespace().map(str::to_owned).collect(),
        challenge,
        user,
        nonce: query.nonce.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::redirect_matches;

    #[test]
    fn loopback_redirects_match_on_any_port_others_exactly() {
        assert!(redirect_matches(
            "http://localhost/cb",
            "http://localhost:53124/cb"
        ));
        assert!(redirect_matches(
            "http://127.0.0.1:8080/cb",
            "http://127.0.0.1:9/cb"
        ));
        assert!(!redirect_matches(
            "http://localhost/cb",
            "http://localhost:1/other"
        ));
        assert!(!redirect_matches(
            "https://app.example/cb",
            "https://app.example:444/cb"
        ));
    }
}

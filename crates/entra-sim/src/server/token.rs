//! `POST /{tenant}/oauth2/v2.0/token`: the grants ([`GrantType`]: client credentials,
//! authorization code with PKCE, refresh token), the client's authentication (a secret in the
//! body or in HTTP Basic, a certificate-signed client assertion, or none for a public
//! client), and the response (`token_type`, `expires_in`, `access_token`, and for a signed-in
//! user `scope`, `refresh_token`, `id_token`, `client_info`) as the v2.0 endpoint answers.

use super::grants::{CodeGrant, RefreshGrant};
use super::scopes::{self, Delegated};
use super::{Failure, Issuer};
use crate::aadsts::Aadsts;
use crate::assertion::{self, JWT_BEARER};
use crate::directory::AppEntry;
use crate::tokens::{self, Audience, ClientAuth, Subject};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// The grant types the endpoint redeems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantType {
    /// `client_credentials`: an app for itself.
    ClientCredentials,
    /// `authorization_code`: a code from the authorization endpoint, with its PKCE verifier.
    AuthorizationCode,
    /// `refresh_token`: a refresh token from an earlier response.
    RefreshToken,
}

impl GrantType {
    fn parse(value: &str) -> Result<GrantType, Aadsts> {
        match value {
            "client_credentials" => Ok(GrantType::ClientCredentials),
            "authorization_code" => Ok(GrantType::AuthorizationCode),
            "refresh_token" => Ok(GrantType::RefreshToken),
            other => Err(Aadsts::UnsupportedGrantType(other.to_owned())),
        }
    }
}

/// The form parameters the endpoint reads.
#[derive(Debug, Default, Deserialize)]
pub struct TokenForm {
    grant_type: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    client_assertion: Option<String>,
    client_assertion_type: Option<String>,
    scope: Option<String>,
    code: Option<String>,
    redirect_uri: Option<String>,
    code_verifier: Option<String>,
    refresh_token: Option<String>,
}

fn required<'a>(value: &'a Option<String>, name: &'static str) -> Result<&'a str, Aadsts> {
    value
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or(Aadsts::MissingParameter(name))
}

/// `client_id:client_secret` of an `Authorization: Basic` header (each form-URL-encoded).
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (id, secret) = text.split_once(':')?;
    let unescape = |s: &str| {
        url::form_urlencoded::parse(format!("v={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
    };
    Some((unescape(id)?, unescape(secret)?))
}

/// The endpoint.
pub async fn token(
    State(issuer): State<Arc<Issuer>>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
    axum::Form(mut form): axum::Form<TokenForm>,
) -> Result<Json<Value>, Failure> {
    issuer.check_tenant(&tenant)?;
    let grant = GrantType::parse(required(&form.grant_type, "grant_type")?)?;
    if let Some((id, secret)) = basic_credentials(&headers) {
        form.client_id.get_or_insert(id);
        form.client_secret.get_or_insert(secret);
    }
    let client_id = required(&form.client_id, "client_id")?;
    let app = issuer
        .directory
        .app(client_id)
        .ok_or_else(|| Aadsts::UnknownClient {
            client_id: client_id.to_owned(),
            tenant: issuer.directory.tenant_id.clone(),
        })?;
    let auth = authenticate(&issuer, app, &form)?;
    let body = match grant {
        GrantType::ClientCredentials => client_credentials(&issuer, app, auth, &form)?,
        GrantType::AuthorizationCode => {
            let code = required(&form.code, "code")?;
            let redirect_uri = required(&form.redirect_uri, "redirect_uri")?;
            let verifier = required(&form.code_verifier, "code_verifier")?;
            let grant =
                issuer
                    .grants()
                    .redeem_code(code, &app.app.client_id, redirect_uri, verifier)?;
            let scopes = scopes::delegated(&issuer.directory, &grant.scopes.join(" "))?;
            user_response(&issuer, app, auth, &grant, scopes)?
        }
        GrantType::RefreshToken => {
            let token = required(&form.refresh_token, "refresh_token")?;
            let refresh = issuer.grants().redeem_refresh(token, &app.app.client_id)?;
            // The refresh token may be spent on another resource's scopes.
            let scope = form.scope.clone().unwrap_or(refresh.scopes.join(" "));
            let scopes = scopes::delegated(&issuer.directory, &scope)?;
            let grant = CodeGrant {
                client_id: refresh.client_id,
                redirect_uri: String::new(),
                scopes: scope.split_whitespace().map(str::to_owned).collect(),
                challenge: String::new(),
                user: refresh.user,
                nonce: None,
            };
            user_response(&issuer, app, auth, &grant, scopes)?
        }
    };
    Ok(Json(body))
}

/// How `app` authenticated in `form`, or why it did not.
fn authenticate(issuer: &Issuer, app: &AppEntry, form: &TokenForm) -> Result<ClientAuth, Aadsts> {
    if let Some(assertion) = &form.client_assertion {
        if form.client_assertion_type.as_deref() != Some(JWT_BEARER) {
            return Err(Aadsts::AssertionMalformed(format!(
                "client_assertion_type must be '{JWT_BEARER}'."
            )));
        }
        if assertion::is_federated(assertion) {
            let jwks = serde_json::from_value(issuer.jwks())
                .map_err(|e| Aadsts::AssertionMalformed(e.to_string()))?;
            assertion::verify_federated(assertion, app, &issuer.cluster_issuer(), &jwks)?;
        } else {
            assertion::verify(assertion, app, &issuer.token_endpoint())?;
        }
        return Ok(ClientAuth::Certificate);
    }
    match &form.client_secret {
        Some(secret) if app.app.secrets.contains(secret) => Ok(ClientAuth::Secret),
        Some(_) => Err(Aadsts::WrongSecret(app.app.client_id.clone())),
        None if app.app.public_client => Ok(ClientAuth::Public),
        None => Err(Aadsts::NoCredential),
    }
}

fn client_credentials(
    issuer: &Issuer,
    app: &AppEntry,
    auth: ClientAuth,
    form: &TokenForm,
) -> Result<Value, Failure> {
    if auth == ClientAuth::Public {
        return Err(Aadsts::NoCredential.into());
    }
    let resource = scopes::client_credentials(&issuer.directory, required(&form.scope, "scope")?)?;
    let lifetime = issuer.directory.token_lifetime_secs;
    let audience = Audience {
        aud: &resource.aud,
        resource: resource.index,
        scp: Vec::new(),
        version: issuer.directory.token_version(resource.index),
    };
    let claims = tokens::access_claims(
        &issuer.issuer(),
        &issuer.directory.tenant_id,
        tokens::Validity::now_by(&issuer.directory),
        &Subject::App(app, auth),
        &audience,
    );
    Ok(json!({
        "token_type": "Bearer",
        "expires_in": lifetime,
        "ext_expires_in": lifetime,
        "access_token": issuer.sign(&claims)?,
    }))
}

/// The response to a user's code or refresh token: access token, and as asked, an ID token
/// (`openid`) and a new refresh token (`offline_access`).
fn user_response(
    issuer: &Issuer,
    app: &AppEntry,
    auth: ClientAuth,
    grant: &CodeGrant,
    scopes: Delegated,
) -> Result<Value, Failure> {
    let user = issuer
        .directory
        .users
        .get(grant.user)
        .ok_or(Aadsts::GrantNotValid("code"))?;
    let tid = &issuer.directory.tenant_id;
    let lifetime = issuer.directory.token_lifetime_secs;
    let audience = Audience {
        aud: &scopes.resource.aud,
        resource: scopes.resource.index,
        scp: scopes.scp.clone(),
        version: issuer.directory.token_version(scopes.resource.index),
    };
    let subject = Subject::User {
        user,
        client: app,
        auth,
    };
    let access = tokens::access_claims(
        &issuer.issuer(),
        tid,
        tokens::Validity::now_by(&issuer.directory),
        &subject,
        &audience,
    );
    let mut body = json!({
        "token_type": "Bearer",
        "scope": scopes.granted(),
        "expires_in": lifetime,
        "ext_expires_in": lifetime,
        "access_token": issuer.sign(&access)?,
        "client_info": tokens::client_info(user, tid),
    });
    if scopes.openid() {
        let id = tokens::id_claims(
            &issuer.issuer(),
            tid,
            tokens::Validity::now_by(&issuer.directory),
            user,
            app,
            grant.nonce.as_deref(),
        );
        body["id_token"] = issuer.sign(&id)?.into();
    }
    if scopes.offline_access() {
        body["refresh_token"] = issuer
            .grants()
            .issue_refresh(RefreshGrant {
                client_id: app.app.client_id.clone(),
                user: grant.user,
                scopes: grant.scopes.clone(),
            })
            .into();
    }
    Ok(body)
}

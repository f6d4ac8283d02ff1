//! What the issuer handed out and has yet to see again: authorization codes (single use, ten
//! minutes, bound to client, redirect URI, PKCE challenge, user and nonce) and refresh tokens
//! (bound to client and user; each use replaces it with a new one, as Entra rotates them).

use crate::aadsts::Aadsts;
use crate::keys::new_opaque;
use aws_lc_rs::digest::{SHA256, digest};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long an authorization code can be redeemed (Entra: about ten minutes).
const CODE_LIFETIME: Duration = Duration::from_secs(600);

/// An authorization code's binding.
#[derive(Debug, Clone)]
pub struct CodeGrant {
    /// The client it was issued to.
    pub client_id: String,
    /// The redirect URI of the authorization request.
    pub redirect_uri: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// The PKCE challenge (S256).
    pub challenge: String,
    /// The signed-in user (index into the directory's users).
    pub user: usize,
    /// The authorization request's nonce, for the ID token.
    pub nonce: Option<String>,
}

/// A refresh token's binding.
#[derive(Debug, Clone)]
pub struct RefreshGrant {
    /// The client it was issued to.
    pub client_id: String,
    /// The user.
    pub user: usize,
    /// The scopes granted.
    pub scopes: Vec<String>,
}

/// Outstanding codes and refresh tokens.
#[derive(Default)]
pub struct Grants {
    codes: HashMap<String, (CodeGrant, Instant)>,
    refresh: HashMap<String, RefreshGrant>,
}

/// `BASE64URL(SHA256(verifier))`, the S256 challenge of a verifier (RFC 7636).
fn s256(verifier: &str) -> String {
    B64.encode(digest(&SHA256, verifier.as_bytes()))
}

impl Grants {
    /// Issues a code for `grant`.
    pub fn issue_code(&mut self, grant: CodeGrant) -> String {
        let now = Instant::now();
        self.codes
            .retain(|_, (_, at)| now.duration_since(*at) < CODE_LIFETIME);
        let code = new_opaque();
        self.codes.insert(code.clone(), (grant, now));
        code
    }

    /// Redeems `code` (once, whatever the outcome) for `client_id` at `redirect_uri` with
    /// `verifier`.
    pub fn redeem_code(
        &mut self,
        code: &str,
        client_id: &str,
        redirect_uri: &str,
        verifier: &str,
    ) -> Result<CodeGrant, Aadsts> {
        let (grant, at) = self
            .codes
            .remove(code)
            .ok_or(Aadsts::GrantNotValid("code"))?;
        if at.elapsed() >= CODE_LIFETIME || grant.client_id != client_id {
            return Err(Aadsts::GrantNotValid("code"));
        }
        if grant.redirect_uri != redirect_uri {
            return Err(Aadsts::RedirectMismatch(redirect_uri.to_owned()));
        }
        if s256(verifier) != grant.challenge {
            return Err(Aadsts::PkceMismatch);
        }
        Ok(grant)
    }

    /// Issues a refresh token for `grant`.
    pub fn issue_refresh(&mut self, grant: RefreshGrant) -> String {
        let token = new_opaque();
        self.refresh.insert(token.clone(), grant);
        token
    }

    /// Takes `token` (it is replaced by the one the response carries) for `client_id`.
    pub fn redeem_refresh(&mut self, token: &str, client_id: &str) -> Result<RefreshGrant, Aadsts> {
        match self.refresh.remove(token) {
            Some(grant) if grant.client_id == client_id => Ok(grant),
            _ => Err(Aadsts::GrantNotValid("refresh_token")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> CodeGrant {
        CodeGrant {
            client_id: "c".into(),
            redirect_uri: "http://localhost/cb".into(),
            scopes: vec!["openid".into()],
            // RFC 7636 appendix B.
            challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
            user: 0,
            nonce: None,
        }
    }

    const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

    #[test]
    fn a_code_redeems_once_with_its_verifier() {
        let mut grants = Grants::default();
        let code = grants.issue_code(grant());
        grants
            .redeem_code(&code, "c", "http://localhost/cb", VERIFIER)
            .unwrap();
        assert_eq!(
            grants
                .redeem_code(&code, "c", "http://localhost/cb", VERIFIER)
                .unwrap_err(),
            Aadsts::GrantNotValid("code")
        );
    }

    #[test]
    fn a_wrong_verifier_or_redirect_is_refused() {
        let mut grants = Grants::default();
        let code = grants.issue_code(grant());
        assert_eq!(
            grants
                .redeem_code(&code, "c", "http://localhost/cb", "wrong")
                .unwrap_err(),
            Aadsts::PkceMismatch
        );
        let code = grants.issue_code(grant());
        assert!(matches!(
            grants.redeem_code(&code, "c", "http://localhost/other", VERIFIER),
            Err(Aadsts::RedirectMismatch(_))
        ));
    }
}

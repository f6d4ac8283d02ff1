//! The errors the token and authorization endpoints answer, as Entra ID answers them: an
//! OAuth 2.0 `error` code, an `AADSTS` number with its message in `error_description`, the
//! number again in `error_codes`, and trace and correlation ids; 401 for a client that failed
//! to authenticate, 400 otherwise. The messages follow Entra's error code reference
//! (learn.microsoft.com/entra/identity-platform/reference-error-codes).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The OAuth 2.0 error codes (RFC 6749 section 5.2, plus Entra's `invalid_resource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthError {
    /// A parameter is missing or malformed.
    InvalidRequest,
    /// The client failed to authenticate.
    InvalidClient,
    /// The code or refresh token is invalid, expired, or not this client's.
    InvalidGrant,
    /// The client may not use this grant (Entra also answers it for unknown clients).
    UnauthorizedClient,
    /// The grant type is not supported.
    UnsupportedGrantType,
    /// The response type is not supported.
    UnsupportedResponseType,
    /// The scope is malformed or not exposed.
    InvalidScope,
    /// The scope names a resource the tenant does not know.
    InvalidResource,
}

impl OAuthError {
    /// The code as it appears in `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            OAuthError::InvalidRequest => "invalid_request",
            OAuthError::InvalidClient => "invalid_client",
            OAuthError::InvalidGrant => "invalid_grant",
            OAuthError::UnauthorizedClient => "unauthorized_client",
            OAuthError::UnsupportedGrantType => "unsupported_grant_type",
            OAuthError::UnsupportedResponseType => "unsupported_response_type",
            OAuthError::InvalidScope => "invalid_scope",
            OAuthError::InvalidResource => "invalid_resource",
        }
    }
}

/// One refusal, with what its message names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Aadsts {
    /// AADSTS90002: the path names another tenant.
    #[error(
        "AADSTS90002: Tenant '{0}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud."
    )]
    TenantNotFound(String),
    /// AADSTS900144: a required parameter is missing.
    #[error("AADSTS900144: The request body must contain the following parameter: '{0}'.")]
    MissingParameter(&'static str),
    /// AADSTS70003: a grant type this issuer does not support.
    #[error("AADSTS70003: The app requested an unsupported grant type '{0}'.")]
    UnsupportedGrantType(String),
    /// AADSTS700054: a response type other than `code`.
    #[error("AADSTS700054: response_type '{0}' is not enabled for the application.")]
    UnsupportedResponseType(String),
    /// AADSTS700016: no app registration has this client id.
    #[error(
        "AADSTS700016: Application with identifier '{client_id}' was not found in the directory '{tenant}'. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You may have sent your authentication request to the wrong tenant."
    )]
    UnknownClient {
        /// The client id asked for.
        client_id: String,
        /// The tenant.
        tenant: String,
    },
    /// AADSTS7000218: a confidential client sent neither a secret nor an assertion.
    #[error(
        "AADSTS7000218: The request body must contain the following parameter: 'client_assertion' or 'client_secret'."
    )]
    NoCredential,
    /// AADSTS7000215: the secret is not one of the app's.
    #[error(
        "AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '{0}'."
    )]
    WrongSecret(String),
    /// AADSTS50027: the client assertion is not a JWT this issuer can read.
    #[error("AADSTS50027: JWT token is invalid or malformed. {0}")]
    AssertionMalformed(String),
    /// AADSTS700027: the assertion's certificate is not registered, or its signature fails.
    #[error("AADSTS700027: Client assertion failed signature validation. {0}")]
    AssertionSignature(String),
    /// AADSTS700024: the assertion has expired or is not yet valid.
    #[error("AADSTS700024: Client assertion is not within its valid time range.")]
    AssertionTimeRange,
    /// AADSTS700023: the assertion's audience is not this token endpoint.
    #[error(
        "AADSTS700023: Client assertion audience claim does not match Realm issuer. Review the documentation at https://learn.microsoft.com/entra/identity-platform/certificate-credentials ."
    )]
    AssertionAudience,
    /// AADSTS700021: the assertion's issuer or subject is not the client id.
    #[error(
        "AADSTS700021: Client assertion application identifier doesn't match 'client_id' parameter. Review the documentation at https://learn.microsoft.com/entra/identity-platform/certificate-credentials ."
    )]
    AssertionSubject,
    /// AADSTS70021: a federated assertion that no federated identity credential of the app
    /// names.
    #[error(
        "AADSTS70021: No matching federated identity record found for presented assertion. Assertion Issuer: '{issuer}'. Assertion Subject: '{subject}'. Assertion Audience: '{audience}'."
    )]
    NoFederatedMatch {
        /// The assertion's `iss`.
        issuer: String,
        /// Its `sub`.
        subject: String,
        /// Its `aud`.
        audience: String,
    },
    /// AADSTS70011: a scope that is malformed or not exposed by its resource.
    #[error(
        "AADSTS70011: The provided request must include a 'scope' input parameter. The provided value for the input parameter 'scope' is not valid. The scope {0} is not valid."
    )]
    InvalidScope(String),
    /// AADSTS1002012: client credentials without `/.default`.
    #[error(
        "AADSTS1002012: The provided value for scope {0} is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI)."
    )]
    ClientCredentialsScope(String),
    /// AADSTS500011: the scope's resource is not in the tenant.
    #[error(
        "AADSTS500011: The resource principal named {resource} was not found in the tenant named {tenant}. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You might have sent your authentication request to the wrong tenant."
    )]
    UnknownResource {
        /// The resource the scope names.
        resource: String,
        /// The tenant.
        tenant: String,
    },
    /// AADSTS50011: the redirect URI is not registered.
    #[error(
        "AADSTS50011: The redirect URI '{redirect_uri}' specified in the request does not match the redirect URIs configured for the application '{client_id}'."
    )]
    RedirectNotRegistered {
        /// The redirect URI asked for.
        redirect_uri: String,
        /// The client.
        client_id: String,
    },
    /// AADSTS9002325: no `code_challenge` with method `S256`.
    #[error(
        "AADSTS9002325: Proof Key for Code Exchange is required for cross-origin authorization code redemption."
    )]
    PkceRequired,
    /// AADSTS50034: the user to sign in does not exist.
    #[error(
        "AADSTS50034: The user account {user} does not exist in the {tenant} directory. To sign into this application, the account must be added to the directory."
    )]
    UnknownUser {
        /// The login hint, or "(none)".
        user: String,
        /// The tenant.
        tenant: String,
    },
    /// AADSTS70000: the code or refresh token is unknown, used, expired, or another client's.
    #[error("AADSTS70000: The provided value for the '{0}' is not valid.")]
    GrantNotValid(&'static str),
    /// AADSTS500112: the redirect URI differs from the authorization request's.
    #[error(
        "AADSTS500112: The reply address '{0}' does not match the reply address provided when requesting Authorization code."
    )]
    RedirectMismatch(String),
    /// AADSTS501481: the code verifier does not hash to the code challenge.
    #[error(
        "AADSTS501481: The Code_Verifier does not match the code_challenge supplied in the authorization request."
    )]
    PkceMismatch,
}

impl Aadsts {
    /// The `AADSTS` number.
    pub fn code(&self) -> u32 {
        match self {
            Aadsts::TenantNotFound(_) => 90002,
            Aadsts::MissingParameter(_) => 900144,
            Aadsts::UnsupportedGrantType(_) => 70003,
            Aadsts::UnsupportedResponseType(_) => 700054,
            Aadsts::UnknownClient { .. } => 700016,
            Aadsts::NoCredential => 7000218,
            Aadsts::WrongSecret(_) => 7000215,
            Aadsts::AssertionMalformed(_) => 50027,
            Aadsts::AssertionSignature(_) => 700027,
            Aadsts::AssertionTimeRange => 700024,
            Aadsts::AssertionAudience => 700023,
            Aadsts::AssertionSubject => 700021,
            Aadsts::NoFederatedMatch { .. } => 70021,
            Aadsts::InvalidScope(_) => 70011,
            Aadsts::ClientCredentialsScope(_) => 1002012,
            Aadsts::UnknownResource { .. } => 500011,
            Aadsts::RedirectNotRegistered { .. } => 50011,
            Aadsts::PkceRequired => 9002325,
            Aadsts::UnknownUser { .. } => 50034,
            Aadsts::GrantNotValid(_) => 70000,
            Aadsts::RedirectMismatch(_) => 500112,
            Aadsts::PkceMismatch => 501481,
        }
    }

    /// The OAuth 2.0 error code Entra answers it with.
    pub fn error(&self) -> OAuthError {
        match self {
            Aadsts::TenantNotFound(_)
            | Aadsts::MissingParameter(_)
            | Aadsts::PkceRequired
            | Aadsts::UnknownUser { .. }
            | Aadsts::RedirectNotRegistered { .. } => OAuthError::InvalidRequest,
            Aadsts::UnsupportedGrantType(_) => OAuthError::UnsupportedGrantType,
            Aadsts::UnsupportedResponseType(_) => OAuthError::UnsupportedResponseType,
            Aadsts::UnknownClient { .. } => OAuthError::UnauthorizedClient,
            Aadsts::NoCredential
            | Aadsts::WrongSecret(_)
            | Aadsts::AssertionMalformed(_)
            | Aadsts::AssertionSignature(_)
            | Aadsts::AssertionTimeRange
            | Aadsts::AssertionAudience
            | Aadsts::AssertionSubject
            | Aadsts::NoFederatedMatch { .. } => OAuthError::InvalidClient,
            Aadsts::InvalidScope(_) | Aadsts::ClientCredentialsScope(_) => OAuthError::InvalidScope,
            Aadsts::UnknownResource { .. } => OAuthError::InvalidResource,
            Aadsts::GrantNotValid(_) | Aadsts::RedirectMismatch(_) | Aadsts::PkceMismatch => {
                OAuthError::InvalidGrant
            }
        }
    }

    /// The HTTP status: 401 when the client failed to authenticate, else 400.
    pub fn status(&self) -> StatusCode {
        if self.error() == OAuthError::InvalidClient {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::BAD_REQUEST
        }
    }

    /// `error_description`: the message, then trace and correlation ids and the time, as
    /// Entra appends them.
    pub fn description(&self) -> String {
        format!(
            "{self} Trace ID: {} Correlation ID: {} Timestamp: {}",
            crate::keys::new_guid(),
            crate::keys::new_guid(),
            chrono::Utc::now().format("%Y-%m-%d %H:%M:%SZ")
        )
    }
}

impl IntoResponse for Aadsts {
    fn into_response(self) -> Response {
        let body = json!({
            "error": self.error().as_str(),
            "error_description": self.description(),
            "error_codes": [self.code()],
            "timestamp": chrono::Utc::now().format("%Y-%m-%d %H:%M:%SZ").to_string(),
            "error_uri": "https://login.microsoftonline.com/error",
        });
        (self.status(), Json(body)).into_response()
    }
}

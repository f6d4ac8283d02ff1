//! Why a token was refused, typed for callers that answer in their own words, and worded
//! (its `Display`) for callers that pass the reason on.

use crate::CLOCK_SKEW;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a JWT with a readable header.
    #[error("the bearer token is not a signed JWT ({0})")]
    NotAJwt(String),
    /// Signed with another algorithm than RS256 (or not at all).
    #[error("the token is signed with {0}; only RS256 is accepted")]
    Algorithm(String),
    /// The header names no key.
    #[error("the token names no signing key (kid)")]
    NoKeyId,
    /// The issuer publishes no key by that `kid`, even after fetching its keys again.
    #[error("the issuer has no signing key '{0}'")]
    UnknownKey(String),
    /// The signature does not match the header and claims.
    #[error("the token's signature does not match its signing key")]
    Signature,
    /// `aud` names none of the accepted audiences.
    #[error("the token is for another audience (aud); this API is {}", accepted.join(" or "))]
    Audience {
        /// The audiences the token names.
        found: Vec<String>,
        /// The audiences accepted.
        accepted: Vec<String>,
    },
    /// `iss` is not the trusted issuer.
    #[error("the token is from another issuer (iss); this API trusts {trusted}")]
    Issuer {
        /// The issuer trusted.
        trusted: String,
    },
    /// `exp` has passed (beyond [`CLOCK_SKEW`]).
    #[error("the token has expired (exp, with {} s of clock skew): get a new one", CLOCK_SKEW.as_secs())]
    Expired {
        /// `exp`, seconds since the Unix epoch.
        exp: u64,
        /// This host's time, seconds since the Unix epoch.
        now: u64,
    },
    /// `nbf` is still ahead (beyond [`CLOCK_SKEW`]).
    #[error("the token is not valid yet (nbf, with {} s of clock skew)", CLOCK_SKEW.as_secs())]
    NotYetValid {
        /// `nbf`, seconds since the Unix epoch.
        nbf: u64,
        /// This host's time, seconds since the Unix epoch.
        now: u64,
    },
    /// A claim every token must have is missing.
    #[error("the token has no {0} claim")]
    MissingClaim(String),
    /// Anything else (claims of the wrong type, for one).
    #[error("the token is refused: {0}")]
    Other(String),
}

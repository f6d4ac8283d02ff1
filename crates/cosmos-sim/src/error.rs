//! The errors of the library API ([`crate::CosmosSim`] and the admin endpoints that share its
//! operations).

use std::net::SocketAddr;

/// Errors of the library API.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The key is not base64.
    #[error("invalid account key: {0}")]
    Key(#[from] cosmos_wire::auth::AuthError),
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// No such database or container.
    #[error("no container {0}")]
    NoContainer(String),
    /// No live range with that id, or it is too narrow to split.
    #[error("range {0} is not a live range that can split")]
    NoRange(String),
    /// A database or container could not be created.
    #[error("cannot create {0}")]
    Create(String),
    /// The Entra ID issuer's discovery document or keys could not be read.
    #[error("cannot read the Entra ID issuer's keys: {0}")]
    Entra(#[from] oidc_verify::DiscoveryError),
    /// A run-time Entra ID change on an endpoint that trusts no issuer.
    #[error("the endpoint trusts no Entra ID issuer (build it with an Entra trust)")]
    NoEntraTrust,
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    Invalid(String),
}

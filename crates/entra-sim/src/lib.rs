//! A local Microsoft Entra ID (Azure AD) token issuer for development and tests, held to
//! Microsoft's own identity libraries (MSAL and azure-identity for Python).
//!
//! It answers a tenant's v2.0 endpoints under `{base}/{tenant}`: OpenID Connect discovery
//! and the signing keys, the token endpoint (client credentials with a secret or a
//! certificate-signed assertion, authorization code with PKCE, refresh tokens), the
//! authorization endpoint (signing in a configured user without a form), and an App Service
//! style managed identity endpoint. Tokens are RS256 JWTs in Entra's v2.0 shape.
//!
//! In tests (cargo feature `test-support`), a directory is built in code:
//!
//! ```no_run
//! # async fn demo() -> Result<(), entra_sim::StartError> {
//! use entra_sim::{App, EntraSim};
//! let sim = EntraSim::builder()
//!     .app(App::new("cosmos").app_id_uri("https://cosmos.azure.com").app_role("Data.Write"))
//!     .app(App::new("writer").secret("s3cret").role("https://cosmos.azure.com", "Data.Write"))
//!     .https()
//!     .start()
//!     .await?;
//! println!("authority {} (trust {:?})", sim.authority(), sim.ca_pem());
//! # Ok(()) }
//! ```
//!
//! Modules: `config` (what is configured), `directory` (it checked and indexed), `keys`
//! (signing keys and JWKS), `tokens` (claims), `assertion` (client assertions), `aadsts`
//! (errors as Entra words them), `certs` (the HTTPS CA, app certificates), `server` (the
//! endpoints), `sim` (starting and stopping).

mod aadsts;
mod assertion;
mod certs;
mod config;
mod directory;
mod keys;
mod server;
mod sim;
mod tokens;

pub use certs::{AppCertificate, Ca, CertError};
pub use config::{App, Config, ManagedIdentity, RoleAssignments, TokenVersion, User};
pub use directory::DirectoryError;
pub use keys::KeyError;
pub use server::{MANAGED_IDENTITY_PATH, ROTATE_KEYS_PATH};
#[cfg(feature = "test-support")]
pub use sim::test_support::Builder;
pub use sim::{EntraSim, Listen, StartError};

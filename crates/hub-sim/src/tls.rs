//! TLS for the device side: the hub's own certificate authority (generated at first start and
//! kept in the state directory as `ca.pem` and `ca-key.pem`), a server certificate it signs
//! at every start (names: the host, `localhost`, `127.0.0.1`), and a rustls server
//! configuration that asks for, but does not require, a client certificate. A client
//! certificate is not checked against a chain: like IoT Hub's thumbprint authentication, the
//! registry decides by its SHA-256 thumbprint. The handshake still proves the client holds the
//! certificate's key.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::DistinguishedName as RustlsDn;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, ServerConfig, SignatureScheme};
use sha2::{Digest as _, Sha256};
use std::path::Path;
use std::sync::Arc;

/// TLS setup errors.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Certificate generation failed.
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("rustls: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A certificate the CA issued, with its key.
pub struct Issued {
    /// The certificate, DER.
    pub cert: CertificateDer<'static>,
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The key, PKCS#8 DER.
    pub key: PrivatePkcs8KeyDer<'static>,
    /// The key, PEM.
    pub key_pem: String,
}

/// The hub's certificate authority.
pub struct Ca {
    /// The CA certificate, PEM (what clients trust).
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "hub-sim local CA");
    dn.push(DnType::OrganizationName, "drone-telemetry hub-sim");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2049, 12, 31);
    params
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl Ca {
    /// Loads the CA from `dir` (`ca.pem`, `ca-key.pem`), creating both at first start.
    pub fn load_or_create(dir: &Path) -> Result<Ca, TlsError> {
        let cert_path = dir.join("ca.pem");
        let key_path = dir.join("ca-key.pem");
        if cert_path.exists() && key_path.exists() {
            let cert_pem = std::fs::read_to_string(&cert_path).map_err(io_err(&cert_path))?;
            let key_pem = std::fs::read_to_string(&key_path).map_err(io_err(&key_path))?;
            let key = KeyPair::from_pem(&key_pem)?;
            return Ok(Ca {
                cert_pem,
                issuer: Issuer::new(ca_params(), key),
            });
        }
        let ca = Ca::generate()?;
        write_private(&key_path, &ca.issuer.key().serialize_pem())?;
        std::fs::write(&cert_path, &ca.cert_pem).map_err(io_err(&cert_path))?;
        Ok(ca)
    }

    /// A new CA held in memory only.
    pub fn generate() -> Result<Ca, TlsError> {
        let key = KeyPair::generate()?;
        let params = ca_params();
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA this one signs, named `common_name` (an intermediate, as device fleets' chains
    /// have), held in memory only.
    #[cfg(any(test, feature = "test-support"))]
    pub fn intermediate(&self, common_name: &str) -> Result<Ca, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = ca_params();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Issues a leaf certificate for `names` (server or client use).
    pub fn issue(&self, names: &[String], common_name: &str) -> Result<Issued, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = rcgen::date_time_ymd(2024, 1, 1);
        params.not_after = rcgen::date_time_ymd(2049, 12, 31);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
        })
    }

    /// The server configuration for `host` (plus `localhost` and `127.0.0.1`).
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, TlsError> {
        let mut names = vec![host.to_owned(), "localhost".into(), "127.0.0.1".into()];
        names.dedup();
        let Issued { cert, key, .. } = self.issue(&names, host)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(AnyClientCert {
            algorithms: provider.signature_verification_algorithms,
        });
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![cert], PrivateKeyDer::Pkcs8(key))?;
        Ok(Arc::new(config))
    }
}

fn write_private(path: &Path, text: &str) -> Result<(), TlsError> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(io_err(path))?;
    file.write_all(text.as_bytes()).map_err(io_err(path))
}

/// The SHA-256 thumbprint of a certificate (upper-case hex), as the registry stores it.
pub fn thumbprint(cert: &[u8]) -> String {
    Sha256::digest(cert)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// Accepts any client certificate whose handshake signature is valid; the registry decides.
#[derive(Debug)]
struct AnyClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[RustlsDn] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_kept_across_starts() {
        let dir = tempfile::tempdir().unwrap();
        let first = Ca::load_or_create(dir.path()).unwrap();
        let second = Ca::load_or_create(dir.path()).unwrap();
        assert_eq!(first.cert_pem, second.cert_pem);
        second.server_config("hub.local").unwrap();
    }

    #[test]
    fn thumbprint_is_sha256_hex() {
        assert_eq!(
            thumbprint(b"abc"),
            "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"
        );
    }
}

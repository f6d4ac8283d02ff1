//! Certificates the issuer makes: its own certificate authority and HTTPS server certificate
//! (for the Microsoft libraries that accept only an `https` authority), in the way
//! hub-sim's `tls` module makes its CA with rcgen; and self-signed RSA certificates for app
//! registrations whose clients sign client assertions.

use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::rsa::{KeyPair as RsaKeyPair, KeySize};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;

/// Certificate generation errors.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen failed.
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("rustls: {0}")]
    Rustls(#[from] rustls::Error),
    /// aws-lc-rs could not make an RSA key.
    #[error("RSA key generation failed")]
    Rsa,
}

/// The issuer's certificate authority, held in memory.
pub struct Ca {
    /// The CA certificate, PEM: what clients trust (`REQUESTS_CA_BUNDLE`, `SSL_CERT_FILE`).
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// A new CA (ECDSA P-256).
    pub fn generate() -> Result<Ca, CertError> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "entra-sim local CA");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A server certificate of `common_name` naming `127.0.0.1` and `localhost`, and its key.
    fn server_cert(&self, common_name: &str) -> Result<(rcgen::Certificate, KeyPair), CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.use_authority_key_identifier_extension = true;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert, key))
    }

    /// A server configuration whose certificate names `127.0.0.1` and `localhost`.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, CertError> {
        let (cert, key) = self.server_cert("entra-sim")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )?;
        Ok(Arc::new(config))
    }

    /// A certificate for another local server (`127.0.0.1`, `localhost`) that the clients
    /// trusting this CA trust: the certificate and its PKCS#8 key, PEM.
    pub fn server_pem(&self, common_name: &str) -> Result<(String, String), CertError> {
        let (cert, key) = self.server_cert(common_name)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// A self-signed RSA certificate for an app registration, and its key.
pub struct AppCertificate {
    /// The certificate, PEM (what the app registration holds).
    pub cert_pem: String,
    /// The private key, PKCS#8 PEM (what the client signs assertions with).
    pub key_pem: String,
}

impl AppCertificate {
    /// A new RSA 2048 certificate named `common_name`. The key comes from aws-lc-rs, since
    /// rcgen on the ring backend signs with RSA keys but cannot generate them.
    pub fn generate(common_name: &str) -> Result<AppCertificate, CertError> {
        let rsa = RsaKeyPair::generate(KeySize::Rsa2048).map_err(|_| CertError::Rsa)?;
        let pkcs8 = rsa.as_der().map_err(|_| CertError::Rsa)?;
        let key = KeyPair::from_pkcs8_der_and_sign_algo(
            &PrivatePkcs8KeyDer::from(pkcs8.as_ref()),
            &rcgen::PKCS_RSA_SHA256,
        )?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert = params.self_signed(&key)?;
        Ok(AppCertificate {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

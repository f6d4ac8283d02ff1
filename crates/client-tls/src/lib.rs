//! TLS configurations of the project's MQTT clients (rumqttc's rustls) from PEM files, the
//! same for every program that connects over TLS (the edge-agent to IoT Hub or a gateway,
//! the writer to an `mqtts://` broker): which roots to trust ([`Trust`]: the system's
//! store, or one CA file such as a local hub's or a private broker's) and, for mutual TLS,
//! which certificate chain and key to present ([`Identity`]), and at what time the
//! server's certificate is checked ([`CheckTime`]: the system clock, or a clock the
//! program trusts more, such as a drone's GPS-corrected one). Every error names the file
//! and what is wrong with it.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rumqttc::TlsConfiguration;
use rumqttc::tokio_rustls::rustls;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The clock a server certificate's validity is checked against, when not the system's.
pub type CheckTime = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The roots a client trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The system's store (`rustls-native-certs`: the OS store, or `SSL_CERT_FILE` /
    /// `SSL_CERT_DIR`).
    System,
    /// Only the CA certificates in this PEM file.
    CaFile(PathBuf),
}

/// A client certificate chain and its private key, PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The certificate chain, leaf first.
    pub cert_path: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key_path: PathBuf,
}

/// Why a TLS configuration cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// No usable root certificate was found on the system.
    #[error(
        "no system root certificates found (install ca-certificates, or set SSL_CERT_FILE): {0}"
    )]
    NoRoots(String),
    /// A PEM file cannot be read or holds nothing usable.
    #[error("{path}: {problem}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// rustls refused the client certificate and key.
    #[error("the client certificate and key do not work together: {0}")]
    ClientAuth(String),
}

fn pem_error(path: &Path, problem: impl Into<String>) -> TlsError {
    TlsError::Pem {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// The MQTT client's TLS configuration: trusts `trust`, presents `identity` if any, and
/// checks the server's certificate at the time `at` gives (the system clock's if `None`).
pub fn mqtt_tls(
    trust: &Trust,
    identity: Option<&Identity>,
    at: Option<&CheckTime>,
) -> Result<TlsConfiguration, TlsError> {
    client_config(trust, identity, at).map(|config| TlsConfiguration::Rustls(Arc::new(config)))
}

fn client_config(
    trust: &Trust,
    identity: Option<&Identity>,
    at: Option<&CheckTime>,
) -> Result<ClientConfig, TlsError> {
    let roots = roots(trust)?;
    let builder = match at {
        None => ClientConfig::builder().with_root_certificates(roots),
        Some(at) => {
            let webpki = WebPkiServerVerifier::builder(Arc::new(roots))
                .build()
                .map_err(|err| TlsError::NoRoots(err.to_string()))?;
            ClientConfig::builder()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(VerifyAt {
                    webpki,
                    at: at.clone(),
                }))
        }
    };
    match identity {
        Some(identity) => {
            let chain = read_pem(&identity.cert_path, |reader| {
                rustls_pemfile::certs(reader).collect::<Result<Vec<_>, _>>()
            })?;
            if chain.is_empty() {
                return Err(pem_error(&identity.cert_path, "no CERTIFICATE block found"));
            }
            let key = read_pem(&identity.key_path, rustls_pemfile::private_key)?
                .ok_or_else(|| pem_error(&identity.key_path, "no private key block found"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|err| TlsError::ClientAuth(err.to_string()))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The standard WebPKI check of the server's certificate, at another clock's time.
struct VerifyAt {
    webpki: Arc<WebPkiServerVerifier>,
    at: CheckTime,
}

impl std::fmt::Debug for VerifyAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyAt").finish_non_exhaustive()
    }
}

impl ServerCertVerifier for VerifyAt {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        _system_now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let now =
            UnixTime::since_unix_epoch((self.at)().duration_since(UNIX_EPOCH).unwrap_or_default());
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

fn roots(trust: &Trust) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    match trust {
        Trust::System => {
            let native = rustls_native_certs::load_native_certs()
                .map_err(|err| TlsError::NoRoots(err.to_string()))?;
            let (added, _ignored) = roots.add_parsable_certificates(native);
            if added == 0 {
                return Err(TlsError::NoRoots("the store is empty".into()));
            }
        }
        Trust::CaFile(path) => {
            let certs = read_pem(path, |reader| {
                rustls_pemfile::certs(reader).collect::<Result<Vec<_>, _>>()
            })?;
            let (added, _ignored) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(pem_error(path, "no usable CA CERTIFICATE block found"));
            }
        }
    }
    Ok(roots)
}

fn read_pem<T>(
    path: &Path,
    parse: impl FnOnce(&mut dyn std::io::BufRead) -> std::io::Result<T>,
) -> Result<T, TlsError> {
    let file = File::open(path).map_err(|err| pem_error(path, err.to_string()))?;
    parse(&mut BufReader::new(file)).map_err(|err| pem_error(path, err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and two certificates it signed (the server's for `localhost`, a client's),
    /// as PEM files in `dir`.
    struct Pki {
        ca: PathBuf,
        server: (
            CertificateDer<'static>,
            rustls::pki_types::PrivateKeyDer<'static>,
        ),
        client: Identity,
        ca_der: CertificateDer<'static>,
    }

    fn pki(dir: &Path, name: &str) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf = |san: &str| {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(vec![san.to_owned()])
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            (cert, key)
        };
        let (server_cert, server_key) = leaf("localhost");
        let (client_cert, client_key) = leaf("drone-7");
        let ca_path = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_path, ca.pem()).unwrap();
        let cert_path = dir.join(format!("{name}-client.pem"));
        std::fs::write(&cert_path, client_cert.pem()).unwrap();
        let key_path = dir.join(format!("{name}-client-key.pem"));
        std::fs::write(&key_path, client_key.serialize_pem()).unwrap();
        Pki {
            ca: ca_path,
            server: (
                server_cert.der().clone(),
                rustls::pki_types::PrivateKeyDer::try_from(server_key.serialize_der()).unwrap(),
            ),
            client: Identity {
                cert_path,
                key_path,
            },
            ca_der: ca.der().clone(),
        }
    }

    /// A TLS handshake in memory between `client` and a server presenting `pki`'s server
    /// certificate and requiring a client certificate signed by `pki`'s CA.
    fn handshake(client: ClientConfig, pki: &Pki) -> Result<(), rustls::Error> {
        let mut client_roots = RootCertStore::empty();
        client_roots.add(pki.ca_der.clone()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(client_roots))
            .build()
            .unwrap();
        let server = rustls::ServerConfig::builder()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![pki.server.0.clone()], pki.server.1.clone_key())
            .unwrap();
        let mut client = rustls::ClientConnection::new(
            Arc::new(client),
            ServerName::try_from("localhost").unwrap(),
        )
        .unwrap();
        let mut server = rustls::ServerConnection::new(Arc::new(server)).unwrap();
        for _ in 0..10 {
            let mut bytes = Vec::new();
            client.write_tls(&mut bytes).unwrap();
            server.read_tls(&mut bytes.as_slice()).unwrap();
            server.process_new_packets()?;
            let mut bytes = Vec::new();
            server.write_tls(&mut bytes).unwrap();
            client.read_tls(&mut bytes.as_slice()).unwrap();
            client.process_new_packets()?;
            if !client.is_handshaking() && !server.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn trusts_only_the_ca_file_and_presents_the_client_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let ours = pki(dir.path(), "ours");
        let theirs = pki(dir.path(), "theirs");
        let trust = Trust::CaFile(ours.ca.clone());
        let now: CheckTime = Arc::new(SystemTime::now);
        for at in [None, Some(&now)] {
            let config = client_config(&trust, Some(&ours.client), at).unwrap();
            handshake(config, &ours).unwrap();
            // A server whose certificate another CA signed is refused.
            let config = client_config(&trust, Some(&ours.client), at).unwrap();
            let err = handshake(config, &theirs).unwrap_err();
            assert!(err.to_string().contains("UnknownIssuer"), "{err}");
            // Without the identity, a server that requires one refuses the client.
            let config = client_config(&trust, None, at).unwrap();
            assert!(handshake(config, &ours).is_err());
        }
    }

    #[test]
    fn checks_the_server_certificate_at_the_time_given() {
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(ca.cert.der().clone()).unwrap();
        let webpki = WebPkiServerVerifier::builder(Arc::new(roots))
            .build()
            .unwrap();
        let verify = |at: SystemTime| {
            let verifier = VerifyAt {
                webpki: webpki.clone(),
                at: Arc::new(move || at),
            };
            // The system clock's time, passed by rustls, is ignored.
            verifier.verify_server_cert(
                ca.cert.der(),
                &[],
                &ServerName::try_from("localhost").unwrap(),
                &[],
                UnixTime::now(),
            )
        };
        verify(SystemTime::now()).unwrap();
        let err = verify(UNIX_EPOCH + std::time::Duration::from_secs(300)).unwrap_err();
        assert!(err.to_string().contains("NotValidYet"), "{err}");
    }

    #[test]
    fn names_the_file_that_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = client_config(&Trust::CaFile(empty.clone()), None, None).unwrap_err();
        assert!(err.to_string().contains("empty.pem"), "{err}");
        let missing = dir.path().join("missing.pem");
        let err = client_config(&Trust::CaFile(missing), None, None).unwrap_err();
        assert!(err.to_string().contains("missing.pem"), "{err}");
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, ca.cert.pem()).unwrap();
        let identity = Identity {
            cert_path: ca_path.clone(),
            key_path: empty.clone(),
        };
        let err = client_config(&Trust::CaFile(ca_path), Some(&identity), None).unwrap_err();
        assert!(err.to_string().contains("empty.pem"), "{err}");
    }
}

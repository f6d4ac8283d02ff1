//! Per-drone certificates for X.509 attestation with DPS, issued from the fleet's
//! intermediate CA where the images are personalised (the `fleet-certs` binary): each drone
//! gets a key of its own and a certificate whose common name is its registration id, so no
//! drone holds a secret that opens another. DPS trusts them through an X.509 enrollment
//! group of the fleet's CA; the drone presents the chain, leaf first (`DPS_CERT_FILE`).

use std::path::{Path, PathBuf};

use chrono::{Datelike as _, Duration, Utc};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};

/// Why a certificate could not be issued or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The CA's certificate or key is not usable PEM, or signing failed.
    #[error("{what}: {source}")]
    Certificate {
        /// What was being done.
        what: &'static str,
        /// The cause.
        source: rcgen::Error,
    },
    /// Not a registration id DPS accepts.
    #[error("{0}")]
    RegistrationId(String),
    /// A drone's files exist already: a certificate is never overwritten.
    #[error("{0} exists: remove it to issue this drone's certificate again")]
    Exists(PathBuf),
}

/// The CA that signs the drones' certificates: the fleet's intermediate.
pub struct FleetCa {
    /// The CA's certificate file as given (its chain up to, not including, the root).
    chain_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A drone's certificate chain (leaf first) and its private key, PEM.
pub struct DroneCertificate {
    /// The leaf, then the CA's chain: what `DPS_CERT_FILE` holds.
    pub chain_pem: String,
    /// The drone's private key: what `DPS_KEY_FILE` holds.
    pub key_pem: String,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CertError + '_ {
    move |source| CertError::Io {
        path: path.to_owned(),
        source,
    }
}

fn cert(what: &'static str) -> impl FnOnce(rcgen::Error) -> CertError {
    move |source| CertError::Certificate { what, source }
}

impl FleetCa {
    /// The CA of the certificate file `cert_path` (the intermediate first, then its own
    /// issuers if any, but not the root) and its private key `key_path`.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<FleetCa, CertError> {
        let chain_pem = std::fs::read_to_string(cert_path).map_err(io(cert_path))?;
        let key_pem = std::fs::read_to_string(key_path).map_err(io(key_path))?;
        let key = KeyPair::from_pem(&key_pem).map_err(cert("the CA's private key"))?;
        let issuer =
            Issuer::from_ca_cert_pem(&chain_pem, key).map_err(cert("the CA's certificate"))?;
        Ok(FleetCa { chain_pem, issuer })
    }

    /// A new key and a certificate for `registration_id`, valid from today for `days`:
    /// common name the registration id, for client authentication.
    pub fn issue(&self, registration_id: &str, days: u32) -> Result<DroneCertificate, CertError> {
        super::check_registration_id(registration_id).map_err(CertError::RegistrationId)?;
        let key = KeyPair::generate().map_err(cert("a drone's key"))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(cert("a drone's certificate"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, registration_id);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let today = Utc::now().date_naive();
        let until = today + Duration::days(i64::from(days));
        params.not_before =
            rcgen::date_time_ymd(today.year(), today.month() as u8, today.day() as u8);
        params.not_after =
            rcgen::date_time_ymd(until.year(), until.month() as u8, until.day() as u8);
        let leaf = params
            .signed_by(&key, &self.issuer)
            .map_err(cert("a drone's certificate"))?;
        Ok(DroneCertificate {
            chain_pem: format!("{}{}", leaf.pem(), self.chain_pem),
            key_pem: key.serialize_pem(),
        })
    }
}

impl DroneCertificate {
    /// Writes `{id}.pem` (the chain) and `{id}-key.pem` (the key, owner-only) in `dir`,
    /// refusing to replace either; returns their paths.
    pub fn write(
        &self,
        dir: &Path,
        registration_id: &str,
    ) -> Result<(PathBuf, PathBuf), CertError> {
        let chain = dir.join(format!("{registration_id}.pem"));
        let key = dir.join(format!("{registration_id}-key.pem"));
        for path in [&chain, &key] {
            if path.exists() {
                return Err(CertError::Exists(path.clone()));
            }
        }
        write_new(&key, &self.key_pem, 0o600)?;
        write_new(&chain, &self.chain_pem, 0o644)?;
        Ok((chain, key))
    }
}

/// Creates `path` with `mode` and `text`; an existing file is an error.
fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), CertError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io(path))?;
    file.write_all(text.as_bytes()).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

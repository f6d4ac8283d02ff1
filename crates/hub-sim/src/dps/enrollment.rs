//! Enrollments: who may register and how each proves it. Groups by name (a symmetric key
//! from which every member's key is derived, or an X.509 CA or intermediate certificate the
//! member's chain leads to) and individual enrollments by registration id (a key, or a
//! certificate's thumbprint), each enabled or disabled. Kept in `enrollments.json` in the
//! state directory, read again before every decision so that `hub-sim enrollment add` reaches
//! a running hub.

use crate::sas::new_key;
use crate::state_dir::{self, StateError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How the members of an enrollment prove who they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Attestation {
    /// Shared keys (base64). A group's members sign with keys derived from them
    /// ([`derive_device_key`]); an individual enrollment's device signs with them directly.
    #[serde(rename_all = "camelCase")]
    SymmetricKey {
        /// Primary key, base64.
        primary_key: String,
        /// Secondary key, base64.
        secondary_key: String,
    },
    /// Groups: a CA or intermediate certificate (PEM) that the chain a member presents
    /// leads to; the leaf's common name is the registration id.
    #[serde(rename_all = "camelCase")]
    X509Ca {
        /// The certificate, PEM.
        ca_pem: String,
    },
    /// Individual enrollments: the device certificate's SHA-256 thumbprint (hex).
    #[serde(rename_all = "camelCase")]
    X509Thumbprint {
        /// SHA-256 of the certificate's DER, upper-case hex.
        thumbprint: String,
    },
}

impl Attestation {
    /// New random symmetric keys.
    pub fn new_symmetric_key() -> Attestation {
        Attestation::SymmetricKey {
            primary_key: new_key(),
            secondary_key: new_key(),
        }
    }
}

/// One enrollment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Enrollment {
    /// How its members attest.
    pub attestation: Attestation,
    /// Whether its members may register.
    pub enabled: bool,
}

/// Which enrollment a registration matched.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "camelCase")]
pub enum EnrollmentId {
    /// A group, by name.
    Group(String),
    /// An individual enrollment, by registration id.
    Individual(String),
}

/// Enrollment errors.
#[derive(Debug, thiserror::Error)]
pub enum EnrollmentError {
    /// The enrollments file.
    #[error(transparent)]
    State(#[from] StateError),
    /// The name is already enrolled with another kind of attestation.
    #[error("enrollment `{0}` exists with another attestation")]
    Conflict(String),
    /// No such enrollment.
    #[error("no enrollment {0:?}")]
    NotFound(EnrollmentId),
    /// A CA certificate that is not one PEM certificate.
    #[error("the CA file is not a PEM certificate")]
    BadCertificate,
    /// A name breaks the service's rules for enrollment group names and registration ids.
    #[error(
        "`{0}` is invalid: 1 to 128 letters, digits and - . _ : (no special character first or last)"
    )]
    InvalidName(String),
}

/// The enrollments: groups by name, individual enrollments by registration id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Book {
    /// Enrollment groups.
    pub groups: BTreeMap<String, Enrollment>,
    /// Individual enrollments.
    pub individual: BTreeMap<String, Enrollment>,
}

impl Book {
    fn get_mut(&mut self, id: &EnrollmentId) -> Option<&mut Enrollment> {
        match id {
            EnrollmentId::Group(name) => self.groups.get_mut(name),
            EnrollmentId::Individual(name) => self.individual.get_mut(name),
        }
    }
}

/// Checks a registration id or group name: the service's rule for registration ids (up to
/// 128 alphanumerics and `- . _ :`, none of those first or last).
pub fn check_name(name: &str) -> Result<(), EnrollmentError> {
    let special = |c: char| "-._:".contains(c);
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || special(c))
        && !name.starts_with(special)
        && !name.ends_with(special);
    if ok {
        Ok(())
    } else {
        Err(EnrollmentError::InvalidName(name.to_owned()))
    }
}

/// A group member's key: base64(HMAC-SHA256(base64decode(group key), registration id)).
/// `None` when the group key is not base64.
pub fn derive_device_key(group_key: &str, registration_id: &str) -> Option<String> {
    let key = BASE64.decode(group_key).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(registration_id.as_bytes());
    Some(BASE64.encode(mac.finalize().into_bytes()))
}

/// The enrollments, in memory and (optionally) in a file.
#[derive(Debug, Default)]
pub struct Enrollments {
    file: Option<PathBuf>,
    book: RwLock<Book>,
}

impl Enrollments {
    /// Enrollments kept in `file` (read now if it exists).
    pub fn open(file: &Path) -> Result<Enrollments, EnrollmentError> {
        let enrollments = Enrollments {
            file: Some(file.to_owned()),
            book: RwLock::default(),
        };
        enrollments.reload()?;
        Ok(enrollments)
    }

    /// Enrollments in memory only.
    #[cfg(test)]
    pub fn in_memory() -> Enrollments {
        Enrollments::default()
    }

    fn reload(&self) -> Result<(), EnrollmentError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        if let Some(book) = state_dir::read_json(path)? {
            *self.book.write() = book;
        }
        Ok(())
    }

    fn change<T>(
        &self,
        edit: impl FnOnce(&mut Book) -> Result<T, EnrollmentError>,
    ) -> Result<T, EnrollmentError> {
        self.reload()?;
        let mut book = self.book.write();
        let out = edit(&mut book)?;
        if let Some(path) = &self.file {
            state_dir::write_json(path, &*book)?;
        }
        Ok(out)
    }

    /// Enrolls a symmetric-key group (or finds it) and returns its primary key.
    pub fn add_symmetric_key_group(&self, name: &str) -> Result<String, EnrollmentError> {
        check_name(name)?;
        self.change(|book| {
            let enrollment = book
                .groups
                .entry(name.to_owned())
                .or_insert_with(|| Enrollment {
                    attestation: Attestation::new_symmetric_key(),
                    enabled: true,
                });
            match &enrollment.attestation {
                Attestation::SymmetricKey { primary_key, .. } => Ok(primary_key.clone()),
                _ => Err(EnrollmentError::Conflict(name.to_owned())),
            }
        })
    }

    /// Enrolls (or re-enrolls) an X.509 group whose members' chains lead to `ca_pem`.
    pub fn add_x509_group(&self, name: &str, ca_pem: &str) -> Result<(), EnrollmentError> {
        check_name(name)?;
        let mut reader = ca_pem.as_bytes();
        let certs: Vec<_> = rustls_pemfile::certs(&mut reader)
            .collect::<Result<_, _>>()
            .map_err(|_| EnrollmentError::BadCertificate)?;
        if certs.len() != 1 {
            return Err(EnrollmentError::BadCertificate);
        }
        self.put(
            EnrollmentId::Group(name.to_owned()),
            Attestation::X509Ca {
                ca_pem: ca_pem.to_owned(),
            },
        )
    }

    /// Enrolls (or re-enrolls) one device by registration id.
    pub fn add_individual(
        &self,
        registration_id: &str,
        attestation: Attestation,
    ) -> Result<(), EnrollmentError> {
        check_name(registration_id)?;
        let attestation = match attestation {
            Attestation::X509Thumbprint { thumbprint } => Attestation::X509Thumbprint {
                thumbprint: thumbprint.to_ascii_uppercase(),
            },
            other => other,
        };
        self.put(
            EnrollmentId::Individual(registration_id.to_owned()),
            attestation,
        )
    }

    fn put(&self, id: EnrollmentId, attestation: Attestation) -> Result<(), EnrollmentError> {
        self.change(|book| {
            let enrollment = Enrollment {
                attestation,
                enabled: true,
            };
            match id {
                EnrollmentId::Group(name) => book.groups.insert(name, enrollment),
                EnrollmentId::Individual(name) => book.individual.insert(name, enrollment),
            };
            Ok(())
        })
    }

    /// Enables or disables an enrollment.
    pub fn set_enabled(&self, id: &EnrollmentId, enabled: bool) -> Result<(), EnrollmentError> {
        self.change(|book| {
            let enrollment = book
                .get_mut(id)
                .ok_or_else(|| EnrollmentError::NotFound(id.clone()))?;
            enrollment.enabled = enabled;
            Ok(())
        })
    }

    /// The enrollments now, read again from the file.
    pub fn book(&self) -> Book {
        if let Err(e) = self.reload() {
            tracing::warn!(error = %e, "enrollments not reloaded");
        }
        self.book.read().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_key_is_the_one_microsofts_documentation_derives() {
        // "Create a symmetric key enrollment group" (learn.microsoft.com, iot-dps): this
        // group key and registration id give this derived device key.
        let group = "8isrFI1sGsIlvvFSSFRiMfCNzv21fjbE/+ah/lSh3lF8e2YG1Te7w1KpZhJFFXJrqYKi9yegxkqIChbqOS9Egw==";
        assert_eq!(
            derive_device_key(group, "sn-007-888-abc-mac-a1-b2-c3-d4-e5-f6").as_deref(),
            Some("Jsm0lyGpjaVYVP2g3FnmnmG9dI/9qU24wNoykUmermc=")
        );
        assert_eq!(derive_device_key("not base64!", "a"), None);
    }

    #[test]
    fn enrollments_survive_a_reopen_and_are_seen_by_a_running_store() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("enrollments.json");
        let running = Enrollments::open(&file).unwrap();
        let other = Enrollments::open(&file).unwrap();
        let key = other.add_symmetric_key_group("fleet").unwrap();
        assert_eq!(other.add_symmetric_key_group("fleet").unwrap(), key);
        other
            .set_enabled(&EnrollmentId::Group("fleet".into()), false)
            .unwrap();
        let book = running.book();
        let fleet = &book.groups["fleet"];
        assert!(!fleet.enabled);
        assert!(matches!(
            &fleet.attestation,
            Attestation::SymmetricKey { primary_key, .. } if *primary_key == key
        ));
        assert!(matches!(
            running.set_enabled(&EnrollmentId::Group("none".into()), true),
            Err(EnrollmentError::NotFound(_))
        ));
    }

    #[test]
    fn names_follow_the_registration_id_rule() {
        assert!(check_name("drone-7.a_b:c").is_ok());
        for bad in ["", "-lead", "trail.", "a/b", "a b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(check_name(&"x".repeat(129)).is_err());
    }

    #[test]
    fn an_x509_group_needs_one_certificate() {
        let store = Enrollments::in_memory();
        assert!(matches!(
            store.add_x509_group("cams", "junk"),
            Err(EnrollmentError::BadCertificate)
        ));
        let ca = crate::tls::Ca::generate().unwrap();
        store.add_x509_group("cams", &ca.cert_pem).unwrap();
        assert!(matches!(
            store.add_symmetric_key_group("cams"),
            Err(EnrollmentError::Conflict(_))
        ));
    }
}

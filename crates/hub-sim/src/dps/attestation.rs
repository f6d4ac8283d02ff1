//! Attestation: which enrollment a registration belongs to, from what its connection shows,
//! and the credentials its device gets on the assigned hub. Pure: no I/O.
//!
//! A SAS token must be for `{idScope}/registrations/{registrationId}`, with policy name
//! `registration` or none (Microsoft's Python SDK sends none), signed with an individual enrollment's key or with a key derived from a
//! symmetric-key group's key. A certificate chain (leaf first, as the TLS handshake presented
//! it) must have the registration id as the leaf's common name, and either the leaf's
//! thumbprint is an individual enrollment's, or the chain leads, signature by signature, to a
//! group's CA or intermediate certificate (which the device may present or leave out). An
//! individual enrollment for the registration id decides alone; otherwise the first group (by
//! name) that the credential satisfies does.

use super::enrollment::{Attestation, Book, Enrollment, EnrollmentId, derive_device_key};
use crate::registry::DeviceAuth;
use crate::sas::{SasError, SasToken, normalise_resource};
use crate::tls::thumbprint;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use x509_parser::prelude::{FromDer as _, X509Certificate};

/// What a registration's connection presented.
#[derive(Debug, Clone, Copy)]
pub enum Credential<'a> {
    /// The CONNECT password: a SAS token.
    Token(&'a str),
    /// The TLS client certificate chain, leaf first, DER.
    Chain(&'a [Vec<u8>]),
}

/// A registration that attested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attested {
    /// The enrollment it matched.
    pub enrollment: EnrollmentId,
    /// The credentials its device gets on the assigned hub.
    pub device_auth: DeviceAuth,
}

/// Why a registration did not attest (each is the service's 401002 to the device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AttestError {
    /// No token and no certificate.
    #[error("no credential")]
    NoCredential,
    /// The token is not a SAS token, names another resource or policy, or has expired.
    #[error("token malformed, for another resource or policy, or expired")]
    BadToken,
    /// The leaf certificate's common name is not the registration id, or it cannot be read.
    #[error("certificate common name is not the registration id")]
    CommonName,
    /// No enrollment accepts the credential.
    #[error("no enrollment accepts the credential")]
    NoEnrollment,
    /// The matching enrollment is disabled.
    #[error("the enrollment is disabled")]
    Disabled,
}

impl AttestError {
    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            AttestError::NoCredential => "no_credential",
            AttestError::BadToken => "bad_token",
            AttestError::CommonName => "common_name",
            AttestError::NoEnrollment => "no_enrollment",
            AttestError::Disabled => "enrollment_disabled",
        }
    }
}

fn enabled(
    id: EnrollmentId,
    enrollment: &Enrollment,
    device_auth: DeviceAuth,
) -> Result<Attested, AttestError> {
    if !enrollment.enabled {
        return Err(AttestError::Disabled);
    }
    Ok(Attested {
        enrollment: id,
        device_auth,
    })
}

/// Decides which enrollment `registration_id` belongs to. `now`: seconds since the epoch.
pub fn attest(
    book: &Book,
    id_scope: &str,
    registration_id: &str,
    credential: Credential<'_>,
    now: u64,
) -> Result<Attested, AttestError> {
    match credential {
        Credential::Token(token) => attest_token(book, id_scope, registration_id, token, now),
        Credential::Chain(chain) => attest_chain(book, registration_id, chain),
    }
}

fn attest_token(
    book: &Book,
    id_scope: &str,
    registration_id: &str,
    token: &str,
    now: u64,
) -> Result<Attested, AttestError> {
    if token.is_empty() {
        return Err(AttestError::NoCredential);
    }
    let token = SasToken::parse(token).map_err(|_| AttestError::BadToken)?;
    let resource = normalise_resource(&format!("{id_scope}/registrations/{registration_id}"));
    if normalise_resource(&token.resource) != resource
        || !matches!(token.key_name.as_deref(), None | Some("registration"))
    {
        return Err(AttestError::BadToken);
    }
    let signed_with = |primary: &str, secondary: &str| {
        let keys: Vec<Vec<u8>> = [primary, secondary]
            .iter()
            .filter_map(|k| BASE64.decode(k).ok())
            .collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        match token.verify(&keys, now) {
            Ok(()) => Ok(true),
            Err(SasError::BadSignature) => Ok(false),
            Err(_) => Err(AttestError::BadToken),
        }
    };
    if let Some(individual) = book.individual.get(registration_id) {
        return match &individual.attestation {
            Attestation::SymmetricKey {
                primary_key,
                secondary_key,
            } if signed_with(primary_key, secondary_key)? => enabled(
                EnrollmentId::Individual(registration_id.to_owned()),
                individual,
                DeviceAuth::Sas {
                    primary_key: primary_key.clone(),
                    secondary_key: secondary_key.clone(),
                },
            ),
            _ => Err(AttestError::NoEnrollment),
        };
    }
    for (name, group) in &book.groups {
        let Attestation::SymmetricKey {
            primary_key,
            secondary_key,
        } = &group.attestation
        else {
            continue;
        };
        let (Some(primary), Some(secondary)) = (
            derive_device_key(primary_key, registration_id),
            derive_device_key(secondary_key, registration_id),
        ) else {
            continue;
        };
        if signed_with(&primary, &secondary)? {
            return enabled(
                EnrollmentId::Group(name.clone()),
                group,
                DeviceAuth::Sas {
                    primary_key: primary,
                    secondary_key: secondary,
                },
            );
        }
    }
    Err(AttestError::NoEnrollment)
}

fn pem_der(pem: &str) -> Option<Vec<u8>> {
    let mut reader = pem.as_bytes();
    rustls_pemfile::certs(&mut reader)
        .next()?
        .ok()
        .map(|der| der.to_vec())
}

/// Whether `chain` (leaf first) leads to `ca`: each certificate is signed by the next one
/// up to a certificate that is `ca` or that `ca` signed.
fn leads_to(chain: &[X509Certificate<'_>], ca: &X509Certificate<'_>) -> bool {
    for (k, cert) in chain.iter().enumerate() {
        let is_ca = cert.subject() == ca.subject() && cert.public_key().raw == ca.public_key().raw;
        if k > 0 && is_ca {
            return true;
        }
        if cert.issuer() == ca.subject() && cert.verify_signature(Some(ca.public_key())).is_ok() {
            return true;
        }
        let Some(parent) = chain.get(k + 1) else {
            return false;
        };
        if cert.verify_signature(Some(parent.public_key())).is_err() {
            return false;
        }
    }
    false
}

fn attest_chain(
    book: &Book,
    registration_id: &str,
    chain: &[Vec<u8>],
) -> Result<Attested, AttestError> {
    let leaf_der = chain.first().ok_or(AttestError::NoCredential)?;
    let parsed: Vec<X509Certificate<'_>> = chain
        .iter()
        .map(|der| X509Certificate::from_der(der).map(|(_, cert)| cert))
        .collect::<Result<_, _>>()
        .map_err(|_| AttestError::CommonName)?;
    let leaf = &parsed[0];
    let common_name = leaf
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok());
    if common_name != Some(registration_id) {
        return Err(AttestError::CommonName);
    }
    if !leaf.validity().is_valid() {
        return Err(AttestError::NoEnrollment);
    }
    let device_auth = DeviceAuth::X509 {
        thumbprint: thumbprint(leaf_der),
    };
    if let Some(individual) = book.individual.get(registration_id) {
        return match &individual.attestation {
            Attestation::X509Thumbprint {
                thumbprint: enrolled,
            } if enrolled.eq_ignore_ascii_case(&thumbprint(leaf_der)) => enabled(
                EnrollmentId::Individual(registration_id.to_owned()),
                individual,
                device_auth,
            ),
            _ => Err(AttestError::NoEnrollment),
        };
    }
    for (name, group) in &book.groups {
        let Attestation::X509Ca { ca_pem } = &group.attestation else {
            continue;
        };
        let Some(ca_der) = pem_der(ca_pem) else {
            continue;
        };
        let Ok((_, ca)) = X509Certificate::from_der(&ca_der) else {
            continue;
        };
        if leads_to(&parsed, &ca) {
            return enabled(EnrollmentId::Group(name.clone()), group, device_auth);
        }
    }
    Err(AttestError::NoEnrollment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dps::enrollment::Enrollments;
    use crate::sas::make_token;
    use crate::tls::{Ca, Issued};

    const SCOPE: &str = "0ne0000ABCD";

    fn token(registration_id: &str, key: &str, expiry: u64) -> String {
        make_token(
            &format!("{SCOPE}/registrations/{registration_id}"),
            &BASE64.decode(key).unwrap(),
            expiry,
            Some("registration"),
        )
    }

    fn decide(
        store: &Enrollments,
        id: &str,
        credential: Credential<'_>,
    ) -> Result<Attested, AttestError> {
        attest(&store.book(), SCOPE, id, credential, 100)
    }

    #[test]
    fn a_group_member_signs_with_its_derived_key() {
        let store = Enrollments::in_memory();
        let other = store.add_symmetric_key_group("a-other").unwrap();
        let group = store.add_symmetric_key_group("fleet").unwrap();
        let derived = derive_device_key(&group, "drone-7").unwrap();
        let attested = decide(
            &store,
            "drone-7",
            Credential::Token(&token("drone-7", &derived, 500)),
        )
        .unwrap();
        assert_eq!(attested.enrollment, EnrollmentId::Group("fleet".into()));
        assert!(matches!(
            attested.device_auth,
            DeviceAuth::Sas { primary_key, .. } if primary_key == derived
        ));
        let refused =
            |id: &str, token: &str| decide(&store, id, Credential::Token(token)).unwrap_err();
        // The group key itself, another member's key, another registration's resource.
        assert_eq!(
            refused("drone-7", &token("drone-7", &group, 500)),
            AttestError::NoEnrollment
        );
        let other_member = derive_device_key(&group, "drone-8").unwrap();
        assert_eq!(
            refused("drone-7", &token("drone-7", &other_member, 500)),
            AttestError::NoEnrollment
        );
        assert_eq!(
            refused("drone-7", &token("drone-8", &derived, 500)),
            AttestError::BadToken
        );
        assert_eq!(
            refused("drone-7", &token("drone-7", &derived, 50)),
            AttestError::BadToken
        );
        assert_eq!(refused("drone-7", ""), AttestError::NoCredential);
        let resource = format!("{SCOPE}/registrations/drone-7");
        let key = BASE64.decode(&derived).unwrap();
        let other_policy = make_token(&resource, &key, 500, Some("iothubowner"));
        assert_eq!(refused("drone-7", &other_policy), AttestError::BadToken);
        let no_policy = make_token(&resource, &key, 500, None);
        assert!(decide(&store, "drone-7", Credential::Token(&no_policy)).is_ok());
        let from_other_group = derive_device_key(&other, "drone-7").unwrap();
        assert_eq!(
            decide(
                &store,
                "drone-7",
                Credential::Token(&token("drone-7", &from_other_group, 500))
            )
            .unwrap()
            .enrollment,
            EnrollmentId::Group("a-other".into())
        );
        store
            .set_enabled(&EnrollmentId::Group("fleet".into()), false)
            .unwrap();
        assert_eq!(
            refused("drone-7", &token("drone-7", &derived, 500)),
            AttestError::Disabled
        );
    }

    #[test]
    fn an_individual_enrollment_decides_alone() {
        let store = Enrollments::in_memory();
        let group = store.add_symmetric_key_group("fleet").unwrap();
        let own = Attestation::new_symmetric_key();
        let Attestation::SymmetricKey { primary_key, .. } = own.clone() else {
            unreachable!()
        };
        store.add_individual("drone-1", own).unwrap();
        let by_group = token(
            "drone-1",
            &derive_device_key(&group, "drone-1").unwrap(),
            500,
        );
        assert_eq!(
            decide(&store, "drone-1", Credential::Token(&by_group)).unwrap_err(),
            AttestError::NoEnrollment
        );
        let by_own = token("drone-1", &primary_key, 500);
        assert_eq!(
            decide(&store, "drone-1", Credential::Token(&by_own))
                .unwrap()
                .enrollment,
            EnrollmentId::Individual("drone-1".into())
        );
    }

    fn chain(issued: &Issued, above: &[&Ca]) -> Vec<Vec<u8>> {
        let mut chain = vec![issued.cert.to_vec()];
        chain.extend(above.iter().map(|ca| pem_der(&ca.cert_pem).unwrap()));
        chain
    }

    #[test]
    fn a_chain_must_lead_to_the_enrolled_ca_or_intermediate() {
        let root = Ca::generate().unwrap();
        let intermediate = root.intermediate("fleet intermediate").unwrap();
        let stranger = Ca::generate().unwrap();
        let store = Enrollments::in_memory();
        store.add_x509_group("by-root", &root.cert_pem).unwrap();
        let leaf = intermediate.issue(&[], "cam-1").unwrap();
        let decide_chain =
            |id: &str, chain: &[Vec<u8>]| decide(&store, id, Credential::Chain(chain));

        let full = chain(&leaf, &[&intermediate]);
        let attested = decide_chain("cam-1", &full).unwrap();
        assert_eq!(attested.enrollment, EnrollmentId::Group("by-root".into()));
        assert_eq!(
            attested.device_auth,
            DeviceAuth::X509 {
                thumbprint: thumbprint(&leaf.cert)
            }
        );
        // Without the intermediate the chain does not reach the root.
        assert_eq!(
            decide_chain("cam-1", &chain(&leaf, &[])).unwrap_err(),
            AttestError::NoEnrollment
        );
        assert_eq!(
            decide_chain("cam-2", &full).unwrap_err(),
            AttestError::CommonName
        );
        let forged = chain(&stranger.issue(&[], "cam-1").unwrap(), &[&intermediate]);
        assert_eq!(
            decide_chain("cam-1", &forged).unwrap_err(),
            AttestError::NoEnrollment
        );

        let by_intermediate = Enrollments::in_memory();
        by_intermediate
            .add_x509_group("by-int", &intermediate.cert_pem)
            .unwrap();
        let direct = leaf.cert.to_vec();
        assert_eq!(
            attest(
                &by_intermediate.book(),
                SCOPE,
                "cam-1",
                Credential::Chain(&[direct]),
                100
            )
            .unwrap()
            .enrollment,
            EnrollmentId::Group("by-int".into())
        );
        by_intermediate
            .set_enabled(&EnrollmentId::Group("by-int".into()), false)
            .unwrap();
        assert_eq!(
            attest(
                &by_intermediate.book(),
                SCOPE,
                "cam-1",
                Credential::Chain(&full),
                100
            )
            .unwrap_err(),
            AttestError::Disabled
        );
    }

    #[test]
    fn an_individual_x509_enrollment_matches_its_thumbprint() {
        let ca = Ca::generate().unwrap();
        let leaf = ca.issue(&[], "cam-9").unwrap();
        let store = Enrollments::in_memory();
        store
            .add_individual(
                "cam-9",
                Attestation::X509Thumbprint {
                    thumbprint: thumbprint(&leaf.cert).to_ascii_lowercase(),
                },
            )
            .unwrap();
        let own = vec![leaf.cert.to_vec()];
        assert!(decide(&store, "cam-9", Credential::Chain(&own)).is_ok());
        let other = vec![ca.issue(&[], "cam-9").unwrap().cert.to_vec()];
        assert_eq!(
            decide(&store, "cam-9", Credential::Chain(&other)).unwrap_err(),
            AttestError::NoEnrollment
        );
    }
}

//! The MQTT source over TLS (`mqtts://`): the writer trusts the broker's CA from
//! `MQTT_CA_FILE` and presents its client certificate to a Mosquitto listener that
//! requires one. Devices publish on the broker's plain listener.

mod common;

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use common::*;
use cosmos_sim::CosmosSim;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use test_harness::{MosquittoConfig, TlsListener};

/// Writes `name.pem` and `name-key.pem` for a certificate of `names` signed by `issuer`.
fn issue(dir: &Path, name: &str, names: &[&str], issuer: &Issuer<'_, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, issuer).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).unwrap();
}

/// A private CA in `dir` (`ca.pem`), a server certificate and a writer's client
/// certificate signed by it, and a broker whose TLS listener requires a client certificate.
fn broker_requiring_client_certificates(dir: &Path) -> test_harness::Mosquitto {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let ca = Issuer::new(ca_params, ca_key);
    issue(dir, "server", &["127.0.0.1", "localhost"], &ca);
    issue(dir, "writer", &["cloud-writer"], &ca);
    MosquittoConfig::default()
        .tls(TlsListener {
            ca_file: dir.join("ca.pem"),
            cert_file: dir.join("server.pem"),
            key_file: dir.join("server-key.pem"),
            require_certificate: true,
        })
        .start()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtts_source_with_a_private_ca_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_requiring_client_certificates(dir.path());
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    let url = format!("mqtts://127.0.0.1:{}", broker.tls_port().unwrap());
    let mut writer_settings = settings(&sim.endpoint(), &url, "tls");
    writer_settings.mqtt_ca_file = Some(dir.path().join("ca.pem"));
    writer_settings.mqtt_client_cert_file = Some(dir.path().join("writer.pem"));
    writer_settings.mqtt_client_key_file = Some(dir.path().join("writer-key.pem"));
    let writer = start_writer(writer_settings).await;

    let s = scenario(50, 4, Utc::now());
    publish(broker.port(), "fleet-tls", &s.messages).await;
    let total = s.messages.len() as u64;
    wait_received_final(&writer, total).await;
    let docs = latest_documents(&container(&sim.endpoint(), "telemetry", "tls")).await;
    assert_newest(&docs, &s.expected);
    writer.shutdown();
    writer.wait().await.unwrap();
}

/// A writer that presents no client certificate is refused by the broker and never
/// becomes ready; it says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtts_without_the_client_certificate_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_requiring_client_certificates(dir.path());
    let sim = CosmosSim::builder().partitions(1).start().await.unwrap();
    let url = format!("mqtts://127.0.0.1:{}", broker.tls_port().unwrap());
    let mut writer_settings = settings(&sim.endpoint(), &url, "tls-refused");
    writer_settings.mqtt_ca_file = Some(dir.path().join("ca.pem"));
    let writer = cloud_writer::Writer::start(writer_settings.resolve().unwrap())
        .await
        .unwrap();
    broker
        .wait_for_log("peer did not return a certificate", Duration::from_secs(20))
        .unwrap();
    assert!(!writer.metrics().is_ready());
    writer.shutdown();
    let _ = writer.wait().await;
}

//! HTTPS from certificate and key files: the API answers over TLS with the certificate the
//! files hold, a renewed pair is served from the next connection without a restart, a pair
//! that does not load leaves the last good one in service, and a wrong file stops the
//! program at start; connections over TLS are capped, and one that never starts its
//! handshake, or idles, is closed. Certificates are rcgen's; the client is reqwest over rustls, trusting
//! only the CA under test.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::{TlsFiles, server_config};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use test_harness::eventually;
use tokio::io::AsyncReadExt as _;
use tokio_util::sync::CancellationToken;

const HOST: &str = "fleet.test";
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A CA and a server certificate for [`HOST`] it signed: (CA PEM, leaf PEM, leaf key PEM).
fn issue(name: &str) -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} CA"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![HOST.to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), leaf.pem(), key.serialize_pem())
}

/// Replaces `path` the way a secret volume or certbot does: a new file renamed over it.
fn replace(path: &Path, text: &str) {
    let new = path.with_extension("new");
    std::fs::write(&new, text).unwrap();
    std::fs::rename(&new, path).unwrap();
}

/// GET `path` over a new connection to `addr` as [`HOST`], trusting only `ca`.
async fn get_trusting(ca: &str, addr: SocketAddr, path: &str) -> Result<String, reqwest::Error> {
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .resolve(HOST, addr)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let response = client
        .get(format!("https://{HOST}:{}{path}", addr.port()))
        .send()
        .await?
        .error_for_status()?;
    response.text().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_and_the_renewed_certificate_from_the_next_connection() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
        };
        let (first_ca, first_cert, first_key) = issue("first");
        std::fs::write(&files.cert, &first_cert).unwrap();
        std::fs::write(&files.key, &first_key).unwrap();

        let sim = CosmosSim::unthrottled().await.unwrap();
        let container = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        seed_latest(&container, &scatter(3, 7)).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = fleet_api::router(
            container,
            ApiOptions::default(),
            fleet_api::Access::anonymous(),
        );
        let stop = CancellationToken::new();
        let served = tokio::spawn(fleet_api::serve_tls(
            listener,
            router,
            server_config(&files).unwrap(),
            Default::default(),
            stop.clone(),
        ));

        // The API over TLS, with the first certificate.
        let drones = get_trusting(&first_ca, addr, "/api/drones").await.unwrap();
        let drones: serde_json::Value = serde_json::from_str(&drones).unwrap();
        assert_eq!(drones["features"].as_array().unwrap().len(), 3, "{drones}");
        // No plain HTTP on the port.
        let plain = reqwest::Client::new()
            .get(format!("http://{addr}/healthz"))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        assert!(plain.is_err() || !plain.unwrap().status().is_success());

        // Renewed under another CA: the next connection gets it, without a restart.
        let (second_ca, second_cert, second_key) = issue("second");
        replace(&files.key, &second_key);
        replace(&files.cert, &second_cert);
        assert_eq!(
            get_trusting(&second_ca, addr, "/healthz").await.unwrap(),
            "ok\n"
        );
        assert!(get_trusting(&first_ca, addr, "/healthz").await.is_err());

        // A key that is not the certificate's: the last good pair stays in service.
        let (_, _, stray_key) = issue("stray");
        replace(&files.key, &stray_key);
        assert_eq!(
            get_trusting(&second_ca, addr, "/healthz").await.unwrap(),
            "ok\n"
        );
        // Put right again (a third pair): served.
        let (third_ca, third_cert, third_key) = issue("third");
        replace(&files.cert, &third_cert);
        replace(&files.key, &third_key);
        assert_eq!(
            get_trusting(&third_ca, addr, "/healthz").await.unwrap(),
            "ok\n"
        );

        stop.cancel();
        served.await.unwrap().unwrap();
    })
    .await
    .expect("the test finishes within its timeout");
}

/// `fleet-api` with `env`; its exit status and standard error.
fn run_to_exit(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_fleet-api"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    let out = wait
        .recv_timeout(Duration::from_secs(30))
        .expect("fleet-api exits within 30 s")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_or_wrong_file_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    let (_, leaf, _) = issue("one");
    let (_, _, other_key) = issue("other");
    std::fs::write(&cert, leaf).unwrap();
    std::fs::write(&key, other_key).unwrap();
    let base = [
        ("COSMOS_ENDPOINT", "http://127.0.0.1:9/"),
        ("COSMOS_KEY", cosmos_wire::auth::EMULATOR_KEY),
        ("API_ALLOW_ANONYMOUS", "true"),
        ("API_TLS_CERT_FILE", cert.to_str().unwrap()),
    ];

    let missing = dir.path().join("absent.key");
    let mut env = base.to_vec();
    env.push(("API_TLS_KEY_FILE", missing.to_str().unwrap()));
    let (code, stderr) = run_to_exit(&env);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("absent.key"), "{stderr}");

    let mut env = base.to_vec();
    env.push(("API_TLS_KEY_FILE", key.to_str().unwrap()));
    let (code, stderr) = run_to_exit(&env);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("does not belong to the certificate"),
        "{stderr}"
    );

    let (code, stderr) = run_to_exit(&base);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("API_TLS_KEY_FILE"), "{stderr}");
}

/// A client trusting only `ca`, reaching [`HOST`] at `addr`, keeping its connection.
fn trusting(ca: &str, addr: SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .resolve(HOST, addr)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_connections_are_capped_and_silent_ones_closed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
        };
        let (ca, cert, key) = issue("capped");
        std::fs::write(&files.cert, &cert).unwrap();
        std::fs::write(&files.key, &key).unwrap();
        let sim = CosmosSim::unthrottled().await.unwrap();
        let container = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = fleet_api::router(
            container,
            ApiOptions::default(),
            fleet_api::Access::anonymous(),
        );
        let serving = fleet_api::Serving {
            header_timeout: Duration::from_secs(10),
            max_connections: 2,
            ..Default::default()
        };
        let stop = CancellationToken::new();
        tokio::spawn(fleet_api::serve_tls(
            listener,
            router,
            server_config(&files).unwrap(),
            serving,
            stop.clone(),
        ));
        let url = format!("https://{HOST}:{}/healthz", addr.port());
        // Two clients keep their connections: a third finds none.
        let (one, two) = (trusting(&ca, addr), trusting(&ca, addr));
        for client in [&one, &two] {
            assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
        }
        assert!(
            trusting(&ca, addr).get(&url).send().await.is_err(),
            "a connection past API_MAX_CONNECTIONS was served"
        );
        // The two idle past API_HEADER_TIMEOUT are closed; then a new client is served.
        eventually(
            "a new client served",
            Duration::from_secs(40),
            || async { trusting(&ca, addr).get(&url).send().await.is_ok() },
            |ok| *ok,
        )
        .await;
        // A connection that never starts its handshake is closed too.
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 64];
        assert!(matches!(silent.read(&mut buf).await, Ok(0) | Err(_)));
        stop.cancel();
    })
    .await
    .expect("the test finished within its time limit");
}

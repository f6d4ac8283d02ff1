//! The official `@azure/cosmos` SDK (pinned in tools/node) against the endpoint: container
//! creation, upsert, `executeBulkOperations` of 10,000 items over 4 ranges (the SDK hashes the
//! keys and routes by range itself), a single-partition query and a cross-partition
//! `ST_DISTANCE` query; the change feed's pull-model iterator from the beginning, from now,
//! across a split and from a continuation token; and the SDK signed in with `@azure/identity`
//! against the local Entra ID issuer where local authentication is disabled (through an HTTPS
//! front made here: the SDK sends bearer tokens only over https, and the endpoint speaks HTTP).

mod common;

use cosmos_sim::{COSMOS_AUDIENCE, CosmosSim, DataRole, EntraTrust};
use entra_sim::{App, EntraSim};
use serde_json::Value;
use std::time::Duration;
use telemetry::geo::haversine_m;
// Not the endpoint's own distance: the check must not share the code it checks.
use test_harness::geo::independent_haversine_m;

/// The longest any test of this file may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `tests/sdk/{script}` against `sim` with node, with `args` after the endpoint, key and
/// packages directory, and `envs` set; the JSON of its last line of output.
async fn run_script(
    script: &str,
    sim: &CosmosSim,
    args: &[&str],
    envs: &[(&str, &std::path::Path)],
) -> Value {
    run_script_at(script, &sim.endpoint(), sim.key(), args, envs).await
}

/// [`run_script`] against `endpoint`, signing with `key`.
async fn run_script_at(
    script: &str,
    endpoint: &str,
    key: &str,
    args: &[&str],
    envs: &[(&str, &std::path::Path)],
) -> Value {
    let script = format!("{}/tests/sdk/{script}", env!("CARGO_MANIFEST_DIR"));
    test_harness::run_sdk_script(script.as_ref(), endpoint, key, args, envs).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdk_bulk_and_queries_over_four_ranges() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::builder()
            .partitions(4)
            .ru_per_sec(400_000.0)
            .start()
            .await
            .unwrap();
        let result = run_script("sdk_roundtrip.mjs", &sim, &[], &[]).await;

        assert_eq!(result["upsertStatus"], 201);
        assert_eq!(result["readId"], "single");
        assert_eq!(
            result["statuses"],
            serde_json::json!({"201": 10000}),
            "{result}"
        );
        assert_eq!(result["ranges"], 4);
        let seqs: Vec<i64> = serde_json::from_value(result["singleSeqs"].clone()).unwrap();
        assert_eq!(seqs, (0..20).map(|k| 7 + 500 * k).collect::<Vec<i64>>());

        let center = (10.05, 50.05);
        let mut expected: Vec<String> = (0..10_000)
            .filter(|i| {
                let p = (
                    10.0 + (i % 100) as f64 * 0.001,
                    50.0 + (i / 100) as f64 * 0.001,
                );
                independent_haversine_m(p, center) < 2000.0
            })
            .map(|i| format!("p-{i}"))
            .collect();
        expected.sort();
        let near: Vec<String> = serde_json::from_value(result["nearIds"].clone()).unwrap();
        assert!(!expected.is_empty() && expected.len() < 10_000);
        assert_eq!(near, expected);

        // Every range took a share of the bulk writes: the SDK's routing and ours agree.
        let stats = sim.stats();
        let parts = &stats.container("sdk", "positions").unwrap().partitions;
        assert!(parts.iter().all(|p| p.documents > 1500), "{parts:?}");
        assert_eq!(parts.iter().map(|p| p.documents).sum::<usize>(), 10_001);
        // The sim's own distance agrees with the reference.
        assert!(
            (haversine_m((0.0, 0.0), (1.0, 1.0)) - independent_haversine_m((0.0, 0.0), (1.0, 1.0)))
                .abs()
                < 1e-6
        );
    })
    .await
    .expect("the test finished within its time limit");
}

/// `(id, seq)` of each change in `seen`, sorted.
fn changes(seen: &Value) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = seen
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["seq"].as_i64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Drones `0..n` at `seq`, sorted as [`changes`] sorts.
fn drones(n: usize, seq: i64) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = (0..n).map(|i| (format!("d-{i}"), seq)).collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdk_reads_the_change_feed_from_the_beginning_now_across_a_split_and_a_token() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sim = CosmosSim::unthrottled().await.unwrap();
        let result = run_script("change_feed.mjs", &sim, &[], &[]).await;

        // Three rounds written before the first read: each drone once, at its latest version,
        // every page in change order.
        assert_eq!(changes(&result["first"]["seen"]), drones(50, 2), "{result}");
        assert_eq!(result["first"]["ordered"], true);
        // From now: nothing before round 3, then exactly round 3; the beginning feed the same.
        assert_eq!(changes(&result["nowBefore"]), drones(0, 0));
        assert_eq!(changes(&result["nowAfter"]), drones(10, 3));
        assert_eq!(changes(&result["second"]), drones(10, 3));
        // Across the split of range 0 (5 ranges then): every drone once more, at round 4.
        assert_eq!(result["splitStatus"], 200);
        assert_eq!(result["ranges"], 5);
        assert_eq!(changes(&result["afterSplit"]["seen"]), drones(50, 4));
        assert_eq!(result["afterSplit"]["ordered"], true);
        // Resumed from the token: only what came after it.
        assert_eq!(changes(&result["fromToken"]), drones(5, 5));
        // The feed's last word on each drone is what a query of the documents answers.
        let mut latest = drones(50, 4);
        for (id, seq) in latest.iter_mut() {
            if id.trim_start_matches("d-").parse::<usize>().unwrap() < 5 {
                *seq = 5;
            }
        }
        latest.sort();
        assert_eq!(changes(&result["stored"]), latest);
    })
    .await
    .expect("the test finished within its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdk_with_an_entra_credential_writes_and_the_key_is_refused() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // MSAL takes only https authorities: the issuer serves HTTPS with its own CA.
        let entra = EntraSim::builder()
            .app(App::new("cosmos").app_id_uri(COSMOS_AUDIENCE))
            .app(App::new("writer").secret("secret"))
            .https()
            .start()
            .await
            .unwrap();
        let ca = tempfile::NamedTempFile::new().unwrap();
        let sim = CosmosSim::builder()
            .entra(
                EntraTrust::new(entra.issuer(), entra.tenant_id()).ca_pem(entra.ca_pem().unwrap()),
            )
            .role_assignment(entra.object_id("writer").unwrap(), DataRole::Contributor)
            .local_auth(false)
            .start()
            .await
            .unwrap();
        sim.create_container("sdk", "positions", "/deviceId")
            .unwrap();
        let (endpoint, front_pem) = https_front(sim.addr()).await;
        let trusted = format!("{}{front_pem}", entra.ca_pem().unwrap());
        std::fs::write(ca.path(), trusted).unwrap();
        let args = [entra.base_url(), entra.tenant_id(), "writer", "secret"];
        let result = run_script_at(
            "sdk_entra.mjs",
            &endpoint,
            sim.key(),
            &args,
            &[("NODE_EXTRA_CA_CERTS", ca.path())],
        )
        .await;

        // The SDK asks for the account's own scope first; the issuer knows no such resource
        // (AADSTS500011), and the SDK falls back to Cosmos DB's.
        let account_scope = format!("{}/.default", endpoint.trim_end_matches('/'));
        let cosmos_scope = format!("{COSMOS_AUDIENCE}/.default");
        let scopes: Vec<&str> = result["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(scopes.first(), Some(&account_scope.as_str()), "{result}");
        assert!(scopes.contains(&cosmos_scope.as_str()), "{result}");

        assert_eq!(result["upsertStatus"], 201, "{result}");
        assert_eq!(result["readSeq"], 1);
        assert_eq!(
            result["queried"],
            serde_json::json!([{"id": "p1", "seq": 1}])
        );
        assert_eq!(
            result["createContainer"],
            serde_json::json!({"code": 403, "substatus": 5300})
        );
        assert_eq!(result["keyed"]["code"], 401, "{result}");
        assert!(
            result["keyed"]["message"].as_str().unwrap().contains(
                "Local Authorization is disabled. Use an AAD token to authorize all requests."
            ),
            "{result}"
        );
    })
    .await
    .expect("the test finished within its time limit");
}

/// An HTTPS front for the endpoint at `backend` on a free port, under a self-signed
/// certificate for 127.0.0.1: its URL and the certificate (PEM) to trust.
async fn https_front(backend: std::net::SocketAddr) -> (String, String) {
    use std::sync::Arc;
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let (Ok(mut tls), Ok(mut plain)) = (
                    acceptor.accept(stream).await,
                    tokio::net::TcpStream::connect(backend).await,
                ) else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    (url, certified.cert.pem())
}

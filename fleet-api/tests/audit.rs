//! The audit over HTTP: one JSON log line per request with who asked, the routed path,
//! RU, calls and status, read back from the log; and the count per route, role and status
//! at `/metrics`.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use cosmos_sim::CosmosSim;
use fleet_api::ApiOptions;
use fleet_api::{Access, AccessConfig, ApiKeys};
use serde_json::Value;

const KEY: &str = "Zk3Q9mC1uT8vR2pX6yL0aN4bW7sE5dH1jK3fG8qV0oI=";

/// Log lines written to memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The audit lines' fields, in order.
    fn audit_lines(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l["target"] == "fleet_api::audit")
            .map(|l| l["fields"].clone())
            .collect()
    }
}

/// The server runs on this test's one thread, so its log goes to the subscriber set here.
#[tokio::test(flavor = "current_thread")]
async fn every_request_is_logged_with_who_asked_and_counted_by_role() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::INFO)
        .with_writer({
            let captured = captured.clone();
            move || captured.clone()
        })
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    tokio::time::timeout(Duration::from_secs(120), async {
        let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
        let c = container(&client(&sim.endpoint(), sim.key()), "positions").await;
        seed_latest(&c, &scatter(3, 11)).await;
        let keys = ApiKeys::parse(&fleet_api::key_line(
            "nightly-report",
            fleet_api::Role::Read,
            KEY,
        )
        .unwrap())
        .unwrap();
        let access = Access::start(AccessConfig {
            keys,
            oidc: None,
            anonymous: false,
        })
        .await
        .unwrap();
        let (base, _stop) = serve_with(c, ApiOptions::default(), access).await;
        let http = reqwest::Client::new();
        let with_key = http
            .get(format!("{base}/api/drones/drone-1"))
            .header("X-API-Key", KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(with_key.status(), 200);
        let without = http.get(format!("{base}/api/drones")).send().await.unwrap();
        assert_eq!(without.status(), 401);
        let metrics = http
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();

        let lines = captured.audit_lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        let read = &lines[0];
        assert_eq!(read["identity"], "key:nightly-report");
        assert_eq!(read["role"], "Fleet.Read");
        assert_eq!(read["route"], "/api/drones/:id");
        assert_eq!(read["method"], "GET");
        assert_eq!(read["status"], 200);
        assert!(read["ru"].as_f64().unwrap() > 0.0, "{read}");
        assert_eq!(read["calls"], 1.0);
        let refused = &lines[1];
        assert_eq!(
            (&refused["identity"], &refused["route"], &refused["status"]),
            (&"none".into(), &"/api/drones".into(), &401.into())
        );
        assert_eq!(refused["ru"], 0.0);
        assert_eq!(lines[2]["route"], "/metrics");
        let counted = |route: &str, role: &str, status: u16| {
            format!(
                "fleet_api_requests_by_role_total{{route=\"{route}\",role=\"{role}\",status=\"{status}\"}} 1"
            )
        };
        assert!(
            metrics.contains(&counted("/api/drones/:id", "Fleet.Read", 200)),
            "{metrics}"
        );
        assert!(
            metrics.contains(&counted("/api/drones", "none", 401)),
            "{metrics}"
        );
        assert!(!String::from_utf8_lossy(&captured.0.lock().unwrap()).contains(KEY));
        sim.shutdown().await;
    })
    .await
    .expect("bounded");
}

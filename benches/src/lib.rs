//! Fixtures shared by the benches in `benches/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet};

/// A latest-position document of `device` (about 330 bytes), as the writer stores it: the
/// `seq`-th position of a drone flying a slow pattern, so that successive documents of a
/// device differ as real overwrites do. Used where a bench writes documents straight to the
/// local endpoint (`cosmos_sim`) or through the bulk writer (`bulk_writer`).
pub fn position_document(device: &str, seq: usize) -> String {
    format!(
        concat!(
            r#"{{"id":"{d}","deviceId":"{d}","seq":{s},"deviceTimeMs":{t},"receivedTimeMs":{r},"#,
            r#""location":{{"type":"Point","coordinates":[{lon:.7},{lat:.7}]}},"#,
            r#""altitudeM":{alt:.3},"headingDeg":{hdg:.2},"speedMps":12.5,"ttl":86400}}"#
        ),
        d = device,
        s = seq,
        t = 1_763_800_000_000u64 + seq as u64 * 5_000,
        r = 1_763_800_000_450u64 + seq as u64 * 5_000,
        lon = -122.12 + (seq % 1000) as f64 * 1e-4,
        lat = 47.66 + (seq % 777) as f64 * 1e-4,
        alt = 120.0 + (seq % 50) as f64 * 0.25,
        hdg = (seq % 360) as f64,
    )
}

/// A wire v1 position of `device` (about 200 bytes), its `seq`-th, taken at `ts`: what an
/// edge agent publishes.
pub fn wire_payload(device: &str, seq: u64, ts: DateTime<Utc>) -> Vec<u8> {
    let ts = ts.format("%Y-%m-%dT%H:%M:%S%.3fZ");
    format!(
        r#"{{"v":1,"deviceId":"{device}","seq":{seq},"ts":"{ts}","lat":47.6205,"lon":-122.3493,"altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81}}"#
    )
    .into_bytes()
}

/// Publishing connections to an MQTT broker (QoS 1), with a count of the PUBACKs they
/// received. Made inside a Tokio runtime: each connection's event loop is a task.
pub struct Publishers {
    /// The clients, one connection each.
    pub clients: Vec<AsyncClient>,
    acked: Arc<AtomicU64>,
}

impl Publishers {
    /// `n` connections to the broker on 127.0.0.1:`port`, client ids `{prefix}{i}`.
    pub fn connect(port: u16, n: usize, prefix: &str) -> Publishers {
        let acked = Arc::new(AtomicU64::new(0));
        let mut clients = Vec::new();
        for i in 0..n {
            let mut options = MqttOptions::new(format!("{prefix}{i}"), "127.0.0.1", port);
            options
                .set_inflight(1000)
                .set_request_channel_capacity(20_000)
                .set_keep_alive(Duration::from_secs(30));
            let (client, mut eventloop) = AsyncClient::new(options, 20_000);
            let acked = acked.clone();
            tokio::spawn(async move {
                loop {
                    match eventloop.poll().await {
                        Ok(Event::Incoming(Packet::PubAck(_))) => {
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            });
            clients.push(client);
        }
        Publishers { clients, acked }
    }

    /// PUBACKs received so far, over all connections.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }
}

/// Whether a bench named `name` is selected: `cargo bench` passes `--bench` and the
/// filter, if any; CI's quick mode (`cargo test --benches`) passes neither.
pub fn selected(name: &str) -> (bool, bool) {
    /// Criterion's options that take a value as the next argument.
    const WITH_VALUE: [&str; 12] = [
        "--warm-up-time",
        "--measurement-time",
        "--sample-size",
        "--profile-time",
        "--save-baseline",
        "--baseline",
        "--load-baseline",
        "--output-format",
        "--color",
        "--nresamples",
        "--noise-threshold",
        "--plotting-backend",
    ];
    let mut args = std::env::args().skip(1);
    let (mut full, mut filters) = (false, Vec::new());
    while let Some(arg) = args.next() {
        if arg == "--bench" {
            full = true;
        } else if WITH_VALUE.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            filters.push(arg);
        }
    }
    let chosen = filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    (chosen, full)
}

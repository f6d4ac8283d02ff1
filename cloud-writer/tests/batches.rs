//! Batched (`PUBLISH_EVERY`) and unbatched agents side by side on one broker (Mosquitto)
//! and one writer: every drone ends at its newest position, and history keeps every
//! position. What the agents published is read by a subscriber of its own and parsed with
//! serde_json, not with the writer's decoder.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_harness::eventually;

use chrono::DateTime;
use common::*;
use cosmos::{QueryRequest, QueryScope};
use cosmos_sim::CosmosSim;
use edge_agent::{Agent, AgentConfig, CancellationToken};
use rumqttc::{AsyncClient, Event, Incoming, MqttOptions, QoS};
use serde_json::Value;
use test_harness::Mosquitto;

/// One published position: drone, seq, device time (ms), lat, lon.
type Published = (String, u64, i64, f64, f64);

/// What the broker delivered to a subscriber of every drone: each message's positions.
#[derive(Default)]
struct Seen {
    messages: Vec<(String, usize, Vec<Published>)>,
}

fn positions_of(payload: &[u8]) -> (String, Vec<Published>) {
    let message: Value = serde_json::from_slice(payload).expect("JSON");
    let one = |p: &Value| -> Published {
        let ts = DateTime::parse_from_rfc3339(p["ts"].as_str().unwrap()).unwrap();
        (
            p["deviceId"].as_str().unwrap().to_owned(),
            p["seq"].as_u64().unwrap(),
            ts.timestamp_millis(),
            p["lat"].as_f64().unwrap(),
            p["lon"].as_f64().unwrap(),
        )
    };
    match message["v"].as_u64() {
        Some(1) => ("v1".into(), vec![one(&message)]),
        Some(2) => (
            "v2".into(),
            message["positions"]
                .as_array()
                .unwrap()
                .iter()
                .map(one)
                .collect(),
        ),
        other => panic!("version {other:?}"),
    }
}

async fn subscribe(broker: &Mosquitto) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let options = MqttOptions::new("observer", broker.host(), broker.port());
    let (client, mut events) = AsyncClient::new(options, 64);
    client
        .subscribe("devices/+/messages/events/#", QoS::AtLeastOnce)
        .await
        .unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (ready, subscribed) = tokio::sync::oneshot::channel();
    let mut ready = Some(ready);
    let task_seen = seen.clone();
    let task = tokio::spawn(async move {
        let _client = client;
        while let Ok(event) = events.poll().await {
            match event {
                Event::Incoming(Incoming::SubAck(_)) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
                Event::Incoming(Incoming::Publish(p)) => {
                    let (version, positions) = positions_of(&p.payload);
                    task_seen
                        .lock()
                        .unwrap()
                        .messages
                        .push((version, p.payload.len(), positions));
                }
                _ => {}
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), subscribed)
        .await
        .expect("subscribed in time")
        .unwrap();
    (seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_reads_batched_and_unbatched_agents_side_by_side() {
    let broker = Mosquitto::start().unwrap();
    let sim = CosmosSim::unthrottled().await.unwrap();
    let mut settings = settings(&sim.endpoint(), &broker.url(), "batches");
    settings.history = Some(true);
    settings.history_ttl = Some("1h".parse().unwrap());
    settings.history_hold = Some("1s".parse().unwrap());
    let writer = start_writer(settings).await;
    let (seen, observer) = subscribe(&broker).await;

    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let mut agents = Vec::new();
    for i in 0..4 {
        let device = device(i);
        let mut config = AgentConfig::simulated(
            &device,
            "127.0.0.1",
            broker.port(),
            dir.path().join(&device),
        );
        config.report_interval = Duration::from_millis(100);
        // Drones 1 and 3 publish every 6 samples in a batch.
        config.publish_every = (i % 2 == 1).then_some(Duration::from_millis(600));
        config.max_fix_age = Duration::from_secs(60);
        config.buffer.fsync = false;
        agents.push(tokio::spawn(Agent::new(config).unwrap().run(stop.clone())));
    }
    eventually(
        "positions of every drone",
        Duration::from_secs(30),
        async || writer.counts(),
        |c| c.positions >= 120,
    )
    .await;
    stop.cancel();
    for agent in agents {
        agent.await.unwrap().unwrap();
    }

    // The writer ends where the broker's deliveries end: every position final.
    let published = || {
        seen.lock()
            .unwrap()
            .messages
            .iter()
            .map(|m| m.2.len() as u64)
            .sum::<u64>()
    };
    let counts = eventually(
        "every published position final",
        Duration::from_secs(30),
        async || (writer.counts(), published()),
        |(c, published)| {
            c.positions == *published
                && c.finished() == *published
                && c.in_flight == 0
                && c.history_written == *published
        },
    )
    .await
    .0;
    observer.abort();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(
        counts.dropped.values().sum::<u64>(),
        counts.dropped(cloud_writer::DropReason::Superseded)
    );

    // Both kinds of agents were there: batches of up to 6 positions within 4 KB.
    let batches: Vec<_> = seen.messages.iter().filter(|m| m.0 == "v2").collect();
    assert!(batches.iter().any(|m| m.2.len() == 6), "batches of 6");
    assert!(batches.iter().all(|m| m.1 < 4096));
    assert!(seen.messages.iter().any(|m| m.0 == "v1"));
    let batched: BTreeSet<&str> = batches.iter().map(|m| m.2[0].0.as_str()).collect();
    assert_eq!(
        batched,
        BTreeSet::from([device(1).as_str(), device(3).as_str()])
    );

    // Every drone at its newest position.
    let mut newest: HashMap<String, (i64, u64, f64, f64)> = HashMap::new();
    for (device, seq, ms, lat, lon) in seen.messages.iter().flat_map(|m| m.2.iter().cloned()) {
        let entry = newest.entry(device).or_insert((ms, seq, lat, lon));
        if (ms, seq) > (entry.0, entry.1) {
            *entry = (ms, seq, lat, lon);
        }
    }
    let container = container(&sim.endpoint(), "telemetry", "batches");
    assert_newest(&latest_documents(&container).await, &newest);

    // History keeps every position, batched or not.
    let every: BTreeSet<(String, u64)> = seen
        .messages
        .iter()
        .flat_map(|m| m.2.iter().map(|p| (p.0.clone(), p.1)))
        .collect();
    let history = container
        .query(
            &QueryRequest {
                query: "SELECT * FROM c WHERE c.kind = 'segment'".into(),
                parameters: vec![],
            },
            QueryScope::AllRanges,
        )
        .await
        .unwrap();
    let kept: BTreeSet<(String, u64)> = history
        .documents
        .iter()
        .flat_map(|d| {
            let device = d["deviceId"].as_str().unwrap().to_owned();
            telemetry::document::stored_points(d)
                .unwrap()
                .into_iter()
                .map(move |p| (device.clone(), p.seq))
        })
        .collect();
    assert_eq!(kept, every);
    assert_eq!(counts.history_written, every.len() as u64);

    // Every message acknowledged to the broker.
    let (_, unacknowledged) = mqtt_acknowledgements(&writer);
    assert_eq!(unacknowledged, 0);
    writer.shutdown();
    writer.wait().await.unwrap();
}

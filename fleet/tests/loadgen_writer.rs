//! The load generator against the real cloud writer: its report carries the writer's own
//! figures, scraped from the writer's Prometheus endpoint before and after the run.

use std::time::Duration;

use cloud_writer::{DropReason, Writer};
use cosmos_sim::CosmosSim;
use fleet::DemoConfig;
use fleet::{Broker, BrokerKind};
use fleet::{LoadgenConfig, Target};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_reports_what_the_writer_received_and_wrote() {
    let broker = tokio::task::spawn_blocking(|| Broker::start(BrokerKind::Embedded))
        .await
        .unwrap()
        .unwrap();
    let sim = CosmosSim::builder().partitions(2).start().await.unwrap();
    sim.create_container(fleet::DATABASE, fleet::CONTAINER, fleet::DEVICE_KEY)
        .unwrap();
    let mut config = fleet::writer_config(&DemoConfig::default(), &broker, &sim);
    config.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    config.probe_addr = None;
    let writer = Writer::start(config).await.unwrap();
    assert!(fleet::wait_until_subscribed(&writer, Duration::from_secs(10)).await);
    let metrics = format!("http://{}/metrics", writer.metrics_addr().unwrap());

    let report = fleet::run_loadgen(
        LoadgenConfig {
            target: Target::Mqtt {
                host: "127.0.0.1".to_owned(),
                port: broker.addr().port(),
            },
            drones: 10,
            rate: 200.0,
            count: Some(300),
            duration: Duration::from_secs(30),
            writer_metrics: Some(metrics),
            drain: Duration::from_secs(15),
            ..LoadgenConfig::default()
        },
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(report.acked, 300);
    let figures = report.writer.clone().expect("the writer's figures");
    assert_eq!(figures.received, 300);
    assert_eq!(figures.settled(), 300, "{figures:?}");
    assert!(figures.written > 0);
    assert_eq!(
        figures
            .dropped
            .get(&DropReason::Stale)
            .copied()
            .unwrap_or(0),
        0
    );
    assert_eq!(figures.throttled, 0);
    // The heat map from the writer's side: both ranges of the container were written.
    assert_eq!(figures.ru_per_range.len(), 2, "{:?}", figures.ru_per_range);
    assert!(figures.ru_per_range.values().all(|ru| *ru > 0.0));
    let p99 = figures.lateness_p99.expect("lateness recorded");
    assert!(p99 > 0.0 && p99 < 30.0, "{p99}");
    let text = report.lines().join("\n");
    assert!(text.contains("writer: received 300"), "{text}");
    writer.shutdown();
    writer.wait().await.unwrap();
}

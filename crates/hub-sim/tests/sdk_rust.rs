//! Microsoft's Rust SDK (`azure_messaging_eventhubs`, what cloud-writer reads with) and a
//! plain fe2o3-amqp receiver reading the hub's partitions well past their first credit window.

mod common;

use common::readers::{Fe2o3Reader, fe2o3_read, sdk_consumer, sdk_read};
use fe2o3_amqp::types::definitions::SenderSettleMode;
use hub_sim::Incoming;
use std::sync::Arc;

fn fill(hub: &hub_sim::HubSim, partitions: usize, per_partition: usize) {
    for p in 0..partitions {
        for i in 0..per_partition {
            let body = format!(r#"{{"partition":{p},"seq":{i}}}"#);
            hub.partitions()
                .append_to(p, Incoming::new("drone-bench", body));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_sdk_reads_four_partitions_from_one_client_past_its_prefetch() {
    let hub = common::TestHub::start(0).await;
    // The SDK's receivers prefetch 300: 1,000 events need the credit granted again 3 times.
    fill(&hub.hub, 4, 1_000);
    let consumer = Arc::new(sdk_consumer(&hub.hub).await);
    let readers = (0..4).map(|p| {
        let consumer = consumer.clone();
        tokio::spawn(async move { sdk_read(&consumer, p, 1_000).await })
    });
    let expected: Vec<i64> = (0..1_000).collect();
    for (p, read) in futures::future::join_all(readers)
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(read.unwrap(), expected, "partition {p}");
    }
    assert_eq!(hub.hub.stats().events_delivered, 4_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fe2o3_reader_keeps_receiving_in_every_settle_mode_it_asks_for() {
    let hub = common::TestHub::start(0).await;
    fill(&hub.hub, 3, 500);
    let mut reader = Fe2o3Reader::connect(&hub.hub).await;
    let expected: Vec<i64> = (0..500).collect();
    for (p, mode) in [
        SenderSettleMode::Settled,
        SenderSettleMode::Unsettled,
        SenderSettleMode::Mixed,
    ]
    .into_iter()
    .enumerate()
    {
        // 50 credits, granted again after every 25 accepted: 500 events need 19 grants.
        let mut receiver = reader.receiver(&hub.hub, p, mode.clone(), 50).await;
        assert_eq!(fe2o3_read(&mut receiver, 500).await, expected, "{mode:?}");
        receiver.close().await.unwrap();
    }
    reader.close().await;
    assert_eq!(hub.hub.stats().events_delivered, 1_500);
}

/// Event Hubs drops the links of a connection whose CBS token expired unrenewed: a
/// receiver reading with a 2-second token is detached with `amqp:unauthorized-access` once
/// it runs out, and the hub counts the drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_whose_token_expired_is_detached_as_unauthorized() {
    let hub = common::TestHub::start(0).await;
    fill(&hub.hub, 1, 10);
    let mut reader = Fe2o3Reader::connect_for(&hub.hub, std::time::Duration::from_secs(2)).await;
    let mut receiver = reader
        .receiver(&hub.hub, 0, SenderSettleMode::Settled, 50)
        .await;
    assert_eq!(
        fe2o3_read(&mut receiver, 10).await,
        (0..10).collect::<Vec<i64>>()
    );
    let ended = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        receiver.recv::<fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>>(),
    )
    .await
    .expect("the link ends once the token expired");
    let error = ended.expect_err("no event after the expiry").to_string();
    assert!(
        error.contains("unauthorized") || error.contains("Unauthorized"),
        "{error}"
    );
    assert_eq!(
        hub.hub.stats().amqp_links_dropped.get("token_expired"),
        Some(&1)
    );
    reader.close().await;
}

//! Microsoft's Rust SDK (`azure_messaging_eventhubs`, what cloud-writer reads with) reading
//! the hub over AMQP/TLS. The SDK has no option for a CA of its own: it verifies with the
//! platform's trust store (rustls-platform-verifier), which on Linux takes `SSL_CERT_FILE`.
//! The variable is set for this process before any thread starts, so this file holds one test.

mod common;

use common::readers::{sdk_consumer_at, sdk_read};
use hub_sim::Incoming;

#[test]
fn the_rust_sdk_reads_over_tls_trusting_the_hubs_ca_through_ssl_cert_file() {
    let state = tempfile::tempdir().unwrap();
    // The CA the hub will load from its state directory.
    hub_sim::Ca::load_or_create(state.path()).unwrap();
    // SAFETY: no other thread runs yet in this test binary (one test, no runtime started).
    unsafe { std::env::set_var("SSL_CERT_FILE", state.path().join("ca.pem")) };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut config = hub_sim::HubConfig::new(state.path());
        config.amqp_tls_port = Some(0);
        let hub = hub_sim::HubSim::start(config).await.unwrap();
        for i in 0..500 {
            hub.partitions()
                .append_to(3, Incoming::new("drone-tls", format!("m{i}")));
        }
        let tls = hub.amqp_tls_addr().unwrap();
        let consumer =
            sdk_consumer_at(tls, "amqps", &hub.eventhub_tls_connection_string().unwrap()).await;
        assert_eq!(
            sdk_read(&consumer, 3, 500).await,
            (0..500).collect::<Vec<i64>>()
        );
        consumer.close().await.unwrap();
        hub.shutdown().await;
    });
}

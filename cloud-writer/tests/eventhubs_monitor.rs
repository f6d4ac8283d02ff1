//! A hub slow to answer its `$management` node, as a busy hub or a crowded machine is: the
//! writer's lag monitor asks every partition's properties each balancing interval, and the
//! SDK asks them one after another. A poll slower than the interval but within 5 s still
//! counts as an answer; a later one reports the source out of reach (not ready) and is asked
//! again. Once the hub answers in time, the writer is ready and the lag it reports is the
//! hub's.

mod common;

use std::time::Duration;
use test_harness::eventually;

use common::replica::{Replica, hub_and_endpoint, route_round};

/// Generous bound for anything the test waits for.
const PATIENCE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_slower_than_the_interval_is_connected_and_one_past_5_s_is_out_of_reach() {
    let (dir, hub, sim) = hub_and_endpoint().await;
    let writer = Replica::start(
        "writer",
        &hub,
        &sim,
        dir.path(),
        &[
            ("EVENTHUBS_LOAD_BALANCING_INTERVAL", "1s"),
            ("EVENTHUBS_OWNERSHIP_EXPIRY", "20s"),
        ],
    );
    eventually(
        "the writer connected, owning the 4 partitions",
        PATIENCE,
        async || writer.counts().await,
        |c| c.connected && c.owned.len() == 4,
    )
    .await;

    // Four partitions asked one after another: a poll takes 12 s, late after 5 s.
    hub.delay_management_answers(Duration::from_secs(3));
    eventually(
        "the writer seeing the hub out of reach",
        PATIENCE,
        async || (writer.counts().await, writer.ready().await),
        |(c, ready)| !c.connected && !ready,
    )
    .await;
    // A poll of 1.6 s: past the 1 s interval, within 5 s.
    hub.delay_management_answers(Duration::from_millis(400));
    eventually(
        "the writer connected by answers slower than the interval",
        PATIENCE,
        async || (writer.counts().await, writer.ready().await),
        |(c, ready)| c.connected && *ready,
    )
    .await;

    hub.delay_management_answers(Duration::ZERO);
    // The lag it reports is the hub's: every position routed now is read, written and
    // checkpointed, and every partition's lag returns to zero.
    route_round(&hub, 40, 1);
    eventually(
        "the round written and every partition's lag back to zero",
        PATIENCE,
        async || (writer.counts().await, writer.lag_events().await),
        |(c, lag)| c.written >= 40 && lag.len() == 4 && lag.values().all(|&n| n == 0),
    )
    .await;
}

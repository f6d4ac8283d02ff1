//! A hub slow to answer its `$management` node, as a busy hub or a crowded machine is: the
//! writer's lag monitor asks every partition's properties each balancing interval, one after
//! another. While a poll is late (past the interval, and at least 5 s), the writer reports
//! its source out of reach (not ready); a late answer still counts once it comes, so a hub
//! that is slow but answers is connected between its late polls, and the lag it reports is
//! the hub's.

mod common;

use std::time::Duration;
use test_harness::eventually;

use common::replica::{Replica, hub_and_endpoint, route_round};

/// Generous bound for anything the test waits for.
const PATIENCE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_slow_to_answer_is_out_of_reach_only_while_a_poll_is_late() {
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

    // Four partitions asked one after another: a poll takes 8 s, late after 5 s.
    hub.delay_management_answers(Duration::from_secs(2));
    eventually(
        "the writer seeing the hub out of reach",
        PATIENCE,
        async || (writer.counts().await, writer.ready().await),
        |(c, ready)| !c.connected && !ready,
    )
    .await;
    eventually(
        "the writer connected again by a late poll's answers, the hub still slow",
        PATIENCE,
        async || writer.counts().await,
        |c| c.connected,
    )
    .await;

    hub.delay_management_answers(Duration::ZERO);
    eventually(
        "the writer connected and ready again",
        PATIENCE,
        async || (writer.counts().await, writer.ready().await),
        |(c, ready)| c.connected && *ready,
    )
    .await;

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

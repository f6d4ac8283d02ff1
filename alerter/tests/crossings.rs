//! A drone flown across a fence gives one `enter` and one `leave` at the webhook: with the
//! alerter SIGKILLed and restarted between the two (also in the middle of delivering the
//! enter), with its range split between the two, and with two replicas sharing the ranges,
//! one of them SIGKILLed mid-run. No alert is lost; a duplicate carries the same id.

mod common;

use std::time::Duration;

use common::*;

const RULES: &str = r#"{"rules":[{"name":"corridor","kind":"geofence","marginM":20}]}"#;

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_enter_and_one_leave_across_a_sigkill_and_a_restart() {
    let bench = Bench::start().await;
    bench.fence("f1").await;
    let hook = Hook::start().await;
    let rules = bench.rules(RULES);
    let mut alerter = Alerter::start(&bench, "a", &hook, &rules, &[]);
    bench.fly("d1", 1, west()).await;
    eventually(LIMIT, "the first position judged", || async {
        alerter.metric("alerter_changes_total").await >= 1.0
    })
    .await;
    bench.fly("d1", 2, inside()).await;
    eventually(LIMIT, "the enter", || async {
        hook.of("d1").contains_key("enter")
    })
    .await;
    alerter.kill();
    // Written while no alerter runs.
    bench.fly("d1", 3, east()).await;
    let restarted = Alerter::start(&bench, "a", &hook, &rules, &[]);
    eventually(LIMIT, "the leave", || async {
        hook.of("d1").contains_key("leave")
    })
    .await;
    // Three more feed polls, for any duplicate or extra alert to show.
    restarted.rounds("feed", 3).await;
    let got = hook.of("d1");
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got["enter"].len(), 1, "one enter id: {got:?}");
    assert_eq!(got["leave"].len(), 1, "one leave id: {got:?}");
    assert!(hook.bad().is_empty(), "{:?}", hook.bad());
    let leave = hook
        .taken()
        .into_iter()
        .find(|e| e["data"]["alert"] == "leave")
        .unwrap();
    assert_eq!(leave["type"], "drone.alert.geofence.exited");
    assert_eq!(leave["data"]["fence"], "f1");
    assert_eq!(leave["subject"], "drones/d1");
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_whose_delivery_a_sigkill_cut_short_is_delivered_after_the_restart() {
    let bench = Bench::start().await;
    bench.fence("f1").await;
    let hook = Hook::start().await;
    let rules = bench.rules(RULES);
    let mut alerter = Alerter::start(&bench, "a", &hook, &rules, &[]);
    bench.fly("d1", 1, west()).await;
    eventually(LIMIT, "the first position judged", || async {
        alerter.metric("alerter_changes_total").await >= 1.0
    })
    .await;
    // The enter reaches the webhook, which never answers: killed mid-delivery.
    hook.hold(true);
    bench.fly("d1", 2, inside()).await;
    eventually(LIMIT, "the enter sent", || async { hook.held() == 1 }).await;
    alerter.kill();
    hook.hold(false);
    let restarted = Alerter::start(&bench, "a", &hook, &rules, &[]);
    eventually(LIMIT, "the enter, from the outbox", || async {
        hook.of("d1").contains_key("enter")
    })
    .await;
    bench.fly("d1", 3, east()).await;
    eventually(LIMIT, "the leave, judged from the kept state", || async {
        hook.of("d1").contains_key("leave")
    })
    .await;
    let got = hook.of("d1");
    assert_eq!(
        (got.len(), got["enter"].len(), got["leave"].len()),
        (2, 1, 1),
        "{got:?}"
    );
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_range_hands_its_lease_to_its_children_and_loses_nothing() {
    let bench = Bench::start().await;
    bench.fence("f1").await;
    let hook = Hook::start().await;
    let rules = bench.rules(RULES);
    let alerter = Alerter::start(&bench, "a", &hook, &rules, &[]);
    bench.fly("d1", 1, west()).await;
    eventually(LIMIT, "the first position judged", || async {
        alerter.metric("alerter_changes_total").await >= 1.0
    })
    .await;
    bench.fly("d1", 2, inside()).await;
    eventually(LIMIT, "the enter", || async {
        hook.of("d1").contains_key("enter")
    })
    .await;
    let range = bench.range_of("d1").await;
    bench
        .sim
        .split_range("telemetry", "positions", &range)
        .unwrap();
    bench.fly("d1", 3, east()).await;
    eventually(
        LIMIT,
        "the leave, read by a child range's follower",
        || async { hook.of("d1").contains_key("leave") },
    )
    .await;
    eventually(LIMIT, "the children's leases held", || async {
        alerter.metric("alerter_leases_held").await == 5.0
    })
    .await;
    let got = hook.of("d1");
    assert_eq!(
        (got.len(), got["enter"].len(), got["leave"].len()),
        (2, 1, 1),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_the_ranges_and_one_killed_loses_nothing() {
    let bench = Bench::start().await;
    bench.fence("f1").await;
    let hook = Hook::start().await;
    let rules = bench.rules(RULES);
    let mut a = Alerter::start(&bench, "a", &hook, &rules, &[]);
    let b = Alerter::start(&bench, "b", &hook, &rules, &[]);
    eventually(LIMIT, "the ranges shared two and two", || async {
        a.metric("alerter_leases_held").await == 2.0 && b.metric("alerter_leases_held").await == 2.0
    })
    .await;
    let drones: Vec<String> = (0..12).map(|i| format!("drone-{i:02}")).collect();
    let mut ranges = std::collections::BTreeSet::new();
    for d in &drones {
        ranges.insert(bench.range_of(d).await);
        bench.fly(d, 1, west()).await;
    }
    assert!(
        ranges.len() >= 3,
        "the drones spread over the ranges: {ranges:?}"
    );
    eventually(LIMIT, "the first positions judged", || async {
        a.metric("alerter_changes_total").await + b.metric("alerter_changes_total").await >= 12.0
    })
    .await;
    for d in &drones {
        bench.fly(d, 2, inside()).await;
    }
    eventually(LIMIT, "every enter", || async {
        drones.iter().all(|d| hook.of(d).contains_key("enter"))
    })
    .await;
    a.kill();
    for d in &drones {
        bench.fly(d, 3, east()).await;
    }
    eventually(
        LIMIT,
        "every leave, after b took a's leases over",
        || async { drones.iter().all(|d| hook.of(d).contains_key("leave")) },
    )
    .await;
    eventually(LIMIT, "b holds every lease", || async {
        b.metric("alerter_leases_held").await == 4.0
    })
    .await;
    for d in &drones {
        let got = hook.of(d);
        assert_eq!(
            (got.len(), got["enter"].len(), got["leave"].len()),
            (2, 1, 1),
            "{d}: {got:?}"
        );
    }
    assert!(hook.bad().is_empty(), "{:?}", hook.bad());
}

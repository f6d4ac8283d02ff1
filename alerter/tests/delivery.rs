//! A webhook that answers 503 for a while gets every alert once it recovers; one that never
//! recovers for one drone has that drone's alert dead-lettered (in the file, and counted)
//! after `ALERT_RETRY_FOR`, while the alerts of the other ranges arrive meanwhile.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;

const RULES: &str = r#"{"rules":[{"name":"corridor","kind":"geofence","marginM":20}]}"#;

const LIMIT: Duration = Duration::from_secs(60);

/// Flies `drones` in from the west, each first position judged before the second.
async fn enter(bench: &Bench, alerter: &Alerter, drones: &[String]) {
    for d in drones {
        bench.fly(d, 1, west()).await;
    }
    eventually(LIMIT, "the first positions judged", || async {
        alerter.metric("alerter_changes_total").await >= drones.len() as f64
    })
    .await;
    for d in drones {
        bench.fly(d, 2, inside()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_down_for_a_while_gets_every_alert_after() {
    let bench = Bench::start().await;
    bench.fence("f1").await;
    let hook = Hook::start().await;
    let down = Arc::new(AtomicBool::new(true));
    let answer = down.clone();
    hook.answer(move |_| {
        if answer.load(Ordering::SeqCst) {
            503
        } else {
            200
        }
    });
    let rules = bench.rules(RULES);
    let alerter = Alerter::start(&bench, "a", &hook, &rules, &[("ALERT_RETRY_FOR", "2m")]);
    let drones: Vec<String> = (0..6).map(|i| format!("drone-{i}")).collect();
    enter(&bench, &alerter, &drones).await;
    eventually(LIMIT, "retries answered 503", || async {
        hook.refused() >= 12
    })
    .await;
    down.store(false, Ordering::SeqCst);
    eventually(LIMIT, "every enter", || async {
        drones.iter().all(|d| hook.of(d).contains_key("enter"))
    })
    .await;
    assert!(bench.dead_letters().is_empty());
    assert_eq!(
        alerter
            .metric("alerter_alerts_total{rule=\"corridor\",kind=\"enter\",outcome=\"delivered\"}")
            .await,
        6.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_never_takes_one_drone_dead_letters_it_and_blocks_no_other_range() {
    let bench = Bench::start().await;
    bench.fence("f1").await;
    let hook = Hook::start().await;
    hook.answer(|e| {
        if e["subject"] == "drones/stuck" {
            503
        } else {
            200
        }
    });
    let rules = bench.rules(RULES);
    let alerter = Alerter::start(&bench, "a", &hook, &rules, &[("ALERT_RETRY_FOR", "40s")]);
    let stuck_range = bench.range_of("stuck").await;
    let mut others = Vec::new();
    for i in 0.. {
        let d = format!("drone-{i}");
        if bench.range_of(&d).await != stuck_range {
            others.push(d);
        }
        if others.len() == 6 {
            break;
        }
    }
    let mut drones = vec!["stuck".to_string()];
    drones.extend(others.iter().cloned());
    enter(&bench, &alerter, &drones).await;
    eventually(LIMIT, "the other ranges' enters", || async {
        others.iter().all(|d| hook.of(d).contains_key("enter"))
    })
    .await;
    // Retried for 16 s at least (the backoff stops when its next wait would pass
    // ALERT_RETRY_FOR): ample for the other ranges on a busy machine.
    assert!(
        bench.dead_letters().is_empty(),
        "the other ranges went on while the stuck alert was still being retried"
    );
    eventually(LIMIT, "the stuck alert dead-lettered", || async {
        !bench.dead_letters().is_empty()
    })
    .await;
    let dead = bench.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["event"]["subject"], "drones/stuck");
    assert_eq!(dead[0]["destination"], hook.url.as_str());
    assert!(
        dead[0]["reason"].as_str().unwrap().contains("503"),
        "{}",
        dead[0]
    );
    eventually(LIMIT, "the dead letter counted", || async {
        alerter
            .metric(
                "alerter_alerts_total{rule=\"corridor\",kind=\"enter\",outcome=\"dead_lettered\"}",
            )
            .await
            == 1.0
    })
    .await;
    assert!(hook.of("stuck").is_empty());
    // The stuck range goes on after the dead letter.
    bench.fly("stuck", 3, east()).await;
    eventually(LIMIT, "the stuck range's next alert tried", || async {
        alerter.metric("alerter_changes_total").await >= drones.len() as f64 * 2.0 + 1.0
    })
    .await;
}

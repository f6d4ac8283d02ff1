//! A short, small demo end to end: real agents onboarded through the local IoT Hub's DPS,
//! the hub (SAS over TLS) and two real writer replicas on its Event Hubs endpoint (or, with `--hub mqtt`, the embedded
//! broker and one writer), and the local endpoint; the report's figures, every drone's
//! document and the spatial query are checked, a killed replica's partitions move, the
//! alerts reach a webhook once each, and the cost per drone it measures is what `fleet plan`
//! predicts.

use std::time::Duration;

use cloud_writer::DropReason;
use fleet::DemoReport;
use fleet::{DemoConfig, HubKind, Indexing, Output, Scenario};
use tokio_util::sync::CancellationToken;

/// One demo at a time: each runs a hub, writer replicas, an endpoint and 40 agents, and
/// the tests share 2 cores with whatever else runs.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn small(scenario: Scenario) -> DemoConfig {
    DemoConfig {
        scenario,
        drones: 40,
        duration: Duration::from_secs(3),
        speedup: 10.0,
        output: Output::Quiet,
        tick: Duration::from_millis(500),
        api_addr: "127.0.0.1:0".parse().unwrap(),
        ..DemoConfig::default()
    }
}

/// Every drone registered through the hub's DPS, by the fleet's tally and by the
/// service's own count.
fn assert_every_drone_registered(report: &DemoReport) {
    let onboarding = report
        .registration
        .as_ref()
        .expect("the drones registered through DPS");
    assert_eq!(onboarding.totals.drones, report.drones, "{onboarding:?}");
    assert_eq!(
        onboarding.totals.registered, onboarding.totals.drones as u64,
        "{onboarding:?}"
    );
    assert!(onboarding.totals.failed.is_empty(), "{onboarding:?}");
    assert_eq!(
        onboarding.assigned_by_dps, report.drones as u64,
        "{onboarding:?}"
    );
    assert!(
        report.render().contains(&format!(
            "drones registered through DPS: {0} of {0} in",
            report.drones
        )),
        "{}",
        report.render()
    );
}

/// Every drone that published has its newest position in its document.
fn assert_every_drone_newest(report: &DemoReport) {
    let newest = report.newest.as_ref().expect("the newest check ran");
    assert_eq!(newest.drones, report.drones, "{newest:?}");
    assert!(newest.all_newest(), "{newest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_demo_runs_on_the_hub_with_two_replicas_and_every_drone_ends_newest() {
    let _one = ONE_AT_A_TIME.lock().await;
    let report = fleet::run_demo(small(Scenario::Bulk), CancellationToken::new())
        .await
        .unwrap();
    assert!(report.guard_refusal.is_none());
    assert!(report.broker.contains("IoT Hub"), "{}", report.broker);
    // Two replicas, two partitions each, both writing; no kill, nothing abandoned.
    assert_eq!(report.replicas.len(), 2, "{:?}", report.replicas);
    for replica in &report.replicas {
        assert_eq!(replica.partitions.len(), 2, "{:?}", report.replicas);
        assert!(replica.written > 0, "{:?}", report.replicas);
    }
    assert!(report.partition_move.is_none());
    assert_eq!(report.abandoned, 0);
    assert_every_drone_registered(&report);
    assert_every_drone_newest(&report);
    assert_the_switched_drones_acknowledged(&report);
    check_bulk_report(report);
}

/// A tenth of the fleet was told `reportInterval` = 1 s of flight through the hub's service
/// API at a third of the flight: each acknowledged the version its patch made (read back from
/// its twin), and their messages came about five times as often.
fn assert_the_switched_drones_acknowledged(report: &DemoReport) {
    let text = report.render();
    let remote = report.remote_config.as_ref().expect("the twin step ran");
    assert_eq!(remote.drones, fleet::switched(report.drones), "{text}");
    assert_eq!(remote.drones, 4, "{text}");
    assert!(remote.failed.is_empty(), "{text}");
    assert_eq!(remote.acks.len(), remote.drones, "{text}");
    assert_eq!(remote.acknowledged(), remote.drones, "{text}");
    for (device, ack) in &remote.acks {
        assert_eq!(ack.ac, 200, "{device}: {text}");
        assert_eq!(Some(&ack.av), remote.desired_versions.get(device), "{text}");
        let value = ack.value.as_f64().unwrap_or_default();
        assert!((value - 0.1).abs() < 1e-9, "1 s of flight at 10x: {text}");
    }
    assert!(
        remote.after_per_min > 2.5 * remote.before_per_min && remote.before_per_min > 6.0,
        "{text}"
    );
    assert!(remote.added_messages_per_day > 0.0, "{text}");
    assert!(
        text.contains("acknowledged (read back with GET /twins): 4 of 4"),
        "{text}"
    );
    assert!(
        text.contains("IoT Hub messages a day for these 4 drones"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_demo_runs_one_writer_on_the_broker() {
    let _one = ONE_AT_A_TIME.lock().await;
    let config = DemoConfig {
        hub: HubKind::Mqtt,
        ..small(Scenario::Bulk)
    };
    let report = fleet::run_demo(config, CancellationToken::new())
        .await
        .unwrap();
    assert!(report.guard_refusal.is_none());
    assert!(report.broker.contains("MQTT"), "{}", report.broker);
    assert_eq!(report.replicas.len(), 1, "{:?}", report.replicas);
    assert!(report.replicas[0].partitions.is_empty());
    assert!(report.registration.is_none(), "no DPS on the broker");
    assert!(report.remote_config.is_none(), "no twin on the broker");
    assert_every_drone_newest(&report);
    check_bulk_report(report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_partitions_move_to_the_other_and_nothing_is_lost() {
    let _one = ONE_AT_A_TIME.lock().await;
    // Killed at a third of 12 s; ownerships expire 4 s after their last renewal.
    let config = DemoConfig {
        duration: Duration::from_secs(12),
        ownership_expiry: Duration::from_secs(4),
        ..small(Scenario::ReplicaKilled)
    };
    let expiry = config.ownership_expiry;
    let report = fleet::run_demo(config, CancellationToken::new())
        .await
        .unwrap();
    let text = report.render();
    eprintln!("{text}");
    let moved = report
        .partition_move
        .as_ref()
        .expect("a replica was killed");
    assert_eq!(moved.killed, "writer-b", "{text}");
    assert_eq!(moved.partitions.len(), 2, "{text}");
    // The move came, and not before the killed replica's ownerships could expire (at
    // the earliest one balancing interval after the kill's last renewal).
    let after = moved.moved_after_secs.expect("the partitions moved");
    assert!(
        after >= (expiry - fleet::BALANCING_INTERVAL).as_secs_f64(),
        "{text}"
    );
    assert!(text.contains("moved to the other in"), "{text}");
    let killed = &report.replicas[1];
    assert_eq!(killed.state, fleet::ReplicaState::Killed, "{text}");
    assert_eq!(report.replicas[0].partitions.len(), 4, "{text}");
    // Nothing lost: every drone at its newest position; every position received at least
    // once; the outcomes account for everything received but what the killed replica
    // abandoned in flight (read again by the other); no outcome but the expected ones.
    assert_every_drone_registered(&report);
    assert_every_drone_newest(&report);
    assert!(report.received >= report.published, "{text}");
    let finished = report.written + report.dropped.values().sum::<u64>();
    assert_eq!(finished + report.abandoned, report.received, "{text}");
    for reason in report.dropped.keys() {
        assert!(
            [
                DropReason::Superseded,
                DropReason::Stale,
                DropReason::Invalid
            ]
            .contains(reason),
            "{text}"
        );
    }
}

/// With `--alerts`: the alerter judges the fleet by a fence across its area and a silent
/// rule; three drones' agents are killed mid-flight. The webhook receiver takes crossings,
/// one silent alert per killed drone and none for the drones still flying, each id with
/// one content; the report says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alerts_reach_the_webhook_once_each_a_silent_one_per_killed_drone() {
    let _one = ONE_AT_A_TIME.lock().await;
    // Killed at a quarter of 12 s; silent after a minute of flight, 6 s at 10x.
    let config = DemoConfig {
        duration: Duration::from_secs(12),
        alerts: Some(fleet::AlertsConfig::default()),
        ..small(Scenario::Bulk)
    };
    let report = fleet::run_demo(config, CancellationToken::new())
        .await
        .unwrap();
    let text = report.render();
    eprintln!("{text}");
    let alerts = report.alerts.as_ref().expect("the alerts ran");
    assert!(alerts.alerter_error.is_none(), "{text}");
    assert_eq!(
        alerts.refused, 0,
        "every delivery signed and structured: {text}"
    );
    assert!(
        alerts.count("enter") + alerts.count("leave") >= 1,
        "a fence crossing: {text}"
    );
    assert_eq!(
        alerts.killed,
        ["drone-00039", "drone-00038", "drone-00037"],
        "{text}"
    );
    assert!(alerts.every_killed_silent_once(), "{text}");
    assert!(alerts.silent_live.is_empty(), "{text}");
    assert_eq!(alerts.count("silent"), 3, "{text}");
    assert!(alerts.conflicting.is_empty(), "one content per id: {text}");
    for alert in &alerts.alerts {
        assert!(
            ["fleet-band", "silent"].contains(&alert.rule.as_str()),
            "{text}"
        );
    }
    // The report's lines: the rules, the kill, the counts by rule, the silent drones, and
    // each id once (or its repeats, with the same content, apart).
    for line in [
        "alerts: fence fleet-band (a band 600 m by 8.0 km across the area",
        "agents killed at ",
        "(signature checked): ",
        "  rule fleet-band: ",
        "  rule silent: silent 3\n",
        "silent: 3 of 3 killed drones alerted once each; 0 drones still flying alerted\n",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    assert_eq!(
        text.contains("every alert id arrived once"),
        alerts.repeated.is_empty(),
        "{text}"
    );
    assert_eq!(
        text.contains("arrived more than once, with the same content"),
        !alerts.repeated.is_empty(),
        "{text}"
    );
    // The killed drones' documents hold the last positions they published.
    assert_every_drone_newest(&report);
}

/// The figures every bulk run shows, whatever the topology.
fn check_bulk_report(report: DemoReport) {
    // 40 drones every 0.5 s for 3 s: about 240 positions.
    assert!(report.published >= 100, "published {}", report.published);
    // A position can reach the writer before its PUBACK reaches the stopping drone.
    assert!(
        report.received >= report.published,
        "received {} < published {}",
        report.received,
        report.published
    );
    assert_eq!(
        report.written + report.dropped.values().sum::<u64>(),
        report.received
    );
    assert!(report.written > 0);
    assert_eq!(
        report.dropped.get(&DropReason::Stale),
        None,
        "{:?}",
        report.dropped
    );
    assert_eq!(report.endpoint_throttled, 0);
    assert!(!report.timeline.is_empty());
    // Every partition got documents (40 keys over 4 ranges), one per drone in total.
    assert_eq!(report.partitions_detail.len(), 4);
    let documents: usize = report.partitions_detail.iter().map(|p| p.documents).sum();
    assert_eq!(documents, 40);

    let query = report.query.expect("the spatial query ran");
    // The expected set comes from the positions the fleet published, by haversine
    // distance; Cosmos answers from the documents the writer wrote.
    assert!(query.expected_from_published > 0, "no drone near the point");
    assert_eq!(query.drones.len(), query.expected_from_published);
    assert!(
        query.missing.is_empty() && query.unexpected.is_empty(),
        "{query:?}"
    );
    assert!(query.drones.iter().all(|(_, d)| *d < query.radius_m));
    assert!(
        query.drones.windows(2).all(|w| w[0].1 <= w[1].1),
        "nearest first"
    );
    // Through the read API, a fan-out: one call per range at least.
    assert!(
        query
            .request
            .starts_with(report.api_url.as_deref().unwrap()),
        "{query:?}"
    );
    assert!(query.request.contains("/api/drones/near?"), "{query:?}");
    assert!(query.calls >= 4);
    assert!(query.request_charge > 0.0);
}

#[tokio::test]
async fn hot_partition_demo_is_refused_by_the_writer_guard() {
    let _one = ONE_AT_A_TIME.lock().await;
    let report = fleet::run_demo(small(Scenario::HotPartition), CancellationToken::new())
        .await
        .unwrap();
    let refusal = report.guard_refusal.clone().expect("the guard refused");
    assert!(refusal.contains("/droneId"), "{refusal}");
    assert_eq!(report.written, 0);
    assert!(report.render().contains("refused to start"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_hot_partition_demo_shows_one_hot_range_with_429s() {
    let _one = ONE_AT_A_TIME.lock().await;
    // 300 RU/s per range against about 80 positions/s of 40 drones, all on one range.
    let config = DemoConfig {
        force: true,
        ru_per_sec: 1_200.0,
        ..small(Scenario::HotPartition)
    };
    let report = fleet::run_demo(config, CancellationToken::new())
        .await
        .unwrap();
    assert!(report.guard_refusal.is_none(), "{:?}", report.guard_refusal);
    assert_eq!(report.scenario, "hot-partition --force");
    assert!(report.written > 0);
    assert_eq!(report.partitions_detail.len(), 4);
    let (hot, idle): (Vec<_>, Vec<_>) = report
        .partitions_detail
        .iter()
        .partition(|p| p.documents > 0);
    assert_eq!(hot.len(), 1, "one range holds the documents: {hot:?}");
    let hot = hot[0];
    assert_eq!(hot.documents, 40, "every drone's document in it: {hot:?}");
    assert!(hot.throttled > 0, "the hot range answered 429s: {hot:?}");
    assert_eq!(report.endpoint_throttled, hot.throttled);
    for p in &idle {
        assert_eq!((p.throttled, p.peak_ru_per_sec), (0, 0.0), "idle: {p:?}");
    }
    let line = report.busiest_range_line().expect("several ranges");
    assert!(
        line.starts_with(&format!("busiest range {}:", hot.range)),
        "{line}"
    );
    assert!(report.render().contains(&line));
}

/// The demo's cost per drone, measured, against the plan's prediction for its settings.
async fn cost(config: DemoConfig) -> fleet::CostComparison {
    let report = fleet::run_demo(config, CancellationToken::new())
        .await
        .unwrap();
    let text = report.render();
    eprintln!("{text}");
    assert_every_drone_newest(&report);
    report.cost.expect("the run's cost")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_costs_what_the_plan_predicts_with_and_without_the_levers() {
    let _one = ONE_AT_A_TIME.lock().await;
    // 5 minutes of flight (10 s at 30x): ten 30 s publishes per drone.
    let flight = |publish_every, min_write_interval, indexing| DemoConfig {
        drones: 12,
        duration: Duration::from_secs(10),
        speedup: 30.0,
        publish_every,
        min_write_interval,
        indexing,
        ..small(Scenario::Bulk)
    };
    let every = cost(flight(None, None, Indexing::Project)).await;
    let thirty = Some(Duration::from_secs(30));
    let levers = cost(flight(thirty, thirty, Indexing::Project)).await;
    for run in [&every, &levers] {
        // At 30x a report is due every 167 ms, and the agent's next report waits for a late
        // one (as on a drone, where a few ms in 5 s do not count): on a busy machine the
        // agents publish fewer messages than the plan's. What each message costs is held to
        // the plan; how many were sent, to a floor.
        let (m, p) = (&run.measured, &run.planned);
        let pace = m.messages_per_day / p.messages_per_day;
        assert!(
            (0.6..=1.15).contains(&pace),
            "published {pace:.2} of the planned messages: measured {m:?} against planned {p:?}"
        );
        for (what, measured, planned) in [
            ("RU", m.ru_per_hour, p.ru_per_hour),
            ("writes", m.writes_per_hour, p.writes_per_hour),
        ] {
            let deviation = (measured / (planned * pace) - 1.0).abs();
            assert!(
                deviation <= 0.15,
                "{what} per message off the plan by {deviation:.2}: measured {m:?} against planned {p:?}"
            );
        }
        assert!(run.largest_message_bytes < 4096);
    }
    // The levers cut messages and writes six times.
    assert!(levers.measured.messages_per_day * 5.0 < every.measured.messages_per_day);
    assert!(levers.measured.writes_per_hour * 5.0 < every.measured.writes_per_hour);
    assert!(levers.measured.ru_per_hour * 5.0 < every.measured.ru_per_hour);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_measures_its_history_beside_the_plan() {
    let _one = ONE_AT_A_TIME.lock().await;
    let report = fleet::run_demo(
        DemoConfig {
            drones: 12,
            duration: Duration::from_secs(10),
            speedup: 30.0,
            history: Some(Duration::from_secs(7 * 86_400)),
            ..small(Scenario::Bulk)
        },
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let text = report.render();
    eprintln!("{text}");
    let history = report
        .cost
        .expect("the run's cost")
        .history
        .expect("history kept");
    // The endpoint's RU on the history documents and their bytes read back, beside the
    // plan's segments (which the writer's segments are held to once it writes them).
    let (m, p) = (history.measured, history.planned);
    assert!(m.ru_per_hour > 0.0 && m.bytes_per_hour > 0.0, "{m:?}");
    assert!(p.ru_per_hour > 0.0 && p.bytes_per_hour > 0.0, "{p:?}");
    assert!(text.contains("history RU per drone-hour"), "{text}");
    assert!(text.contains("history bytes/drone-hour"), "{text}");
    // The plan for flights like the demo's (their length, how often the drones reported)
    // holds: within 15 %.
    let within = |measured: f64, planned: f64| (measured / planned - 1.0).abs() <= 0.15;
    assert!(
        within(m.ru_per_hour, p.ru_per_hour),
        "RU {m:?} {p:?}\n{text}"
    );
    assert!(
        within(m.bytes_per_hour, p.bytes_per_hour),
        "bytes {m:?} {p:?}\n{text}"
    );
}

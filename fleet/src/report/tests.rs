//! The report rendered from hand-made figures: each part of the text says what the run
//! measured.

use super::*;

#[test]
fn a_guard_refusal_is_the_whole_story() {
    let report = DemoReport {
        scenario: "hot-partition".to_owned(),
        guard_refusal: Some("documents lack /droneId".to_owned()),
        written: 5,
        ..DemoReport::default()
    };
    let text = report.render();
    assert!(text.contains("refused to start (the guard):\n  documents lack /droneId"));
    assert!(!text.contains("written"), "{text}");
}

#[test]
fn a_hot_partition_shows_as_one_busy_range_against_idle_ones() {
    let range = |id: &str, ru_total, peak, documents, throttled| PartitionTotals {
        range: id.to_owned(),
        ru_total,
        peak_ru_per_sec: peak,
        capacity: 100.0,
        documents,
        throttled,
    };
    let report = DemoReport {
        partitions_detail: vec![
            range("0", 10.0, 0.0, 0, 0),
            range("1", 990.0, 100.0, 40, 37),
            range("2", 0.0, 0.0, 0, 0),
        ],
        ..DemoReport::default()
    };
    assert_eq!(
        report.busiest_range_line().unwrap(),
        "busiest range 1: 99% of the RU, 40 docs, 37 429s; the other 2 ranges: peak 0 RU/s, 0 docs, 0 429s"
    );
    assert!(report.render().contains("busiest range 1: 99%"));
    let single = DemoReport {
        partitions_detail: vec![range("0", 10.0, 1.0, 1, 0)],
        ..DemoReport::default()
    };
    assert_eq!(single.busiest_range_line(), None);
}

#[test]
fn renders_figures_heat_map_and_query() {
    let report = DemoReport {
        scenario: "bulk".to_owned(),
        drones: 1000,
        speedup: 10.0,
        wall_secs: 60.0,
        published: 120_000,
        received: 120_000,
        written: 119_000,
        dropped: BTreeMap::from([(DropReason::Stale, 1_000)]),
        lateness_p99: Some(0.4),
        partitions_detail: vec![PartitionTotals {
            range: "0".to_owned(),
            peak_ru_per_sec: 2_500.0,
            capacity: 5_000.0,
            ..PartitionTotals::default()
        }],
        query: Some(SpatialAnswer {
            radius_m: 1000.0,
            drones: vec![("drone-00001".to_owned(), 12.4)],
            expected_from_published: 1,
            calls: 4,
            ..SpatialAnswer::default()
        }),
        ..DemoReport::default()
    };
    let text = report.render();
    assert!(text.contains("60 s wall = 10.0 min of flight"), "{text}");
    assert!(text.contains("dropped 1000 (stale 1000)"), "{text}");
    assert!(text.contains("p99 400 ms"), "{text}");
    assert!(
        text.contains(&format!("|{}{}|", "#".repeat(20), " ".repeat(20))),
        "{text}"
    );
    assert!(text.contains("drones within 1000 m"), "{text}");
    assert!(text.contains("drone-00001        12 m"), "{text}");
}

#[test]
fn renders_replicas_the_move_the_accounting_and_the_newest_check() {
    let replica = |name: &str, state, partitions: &[&str]| ReplicaTotals {
        name: name.to_owned(),
        state,
        received: 10,
        written: 9,
        dropped: 1,
        partitions: partitions.iter().map(|p| (*p).to_owned()).collect(),
    };
    let mut report = DemoReport {
        published: 18,
        received: 20,
        written: 17,
        dropped: BTreeMap::from([(DropReason::Superseded, 1)]),
        abandoned: 2,
        replicas: vec![
            replica("writer-a", ReplicaState::Running, &["0", "1", "2", "3"]),
            replica("writer-b", ReplicaState::Killed, &["0", "3"]),
        ],
        partition_move: Some(PartitionMove {
            killed: "writer-b".to_owned(),
            partitions: vec!["0".to_owned(), "3".to_owned()],
            killed_at_secs: 20.0,
            ownership_expiry_secs: 10.0,
            moved_after_secs: Some(8.8),
        }),
        newest: Some(NewestCheck {
            drones: 2,
            at_newest: 2,
            ..NewestCheck::default()
        }),
        ..DemoReport::default()
    };
    let text = report.render();
    assert!(
        text.contains(
            "replica writer-b (killed): received 10   written 9   dropped 1   partitions [0,3]"
        ),
        "{text}"
    );
    assert!(
        text.contains("its partitions [0,3] moved to the other in 8.8 s (ownership expiry 10 s)"),
        "{text}"
    );
    assert!(
        text.contains("received 20 = published 18 + 2 read again"),
        "{text}"
    );
    assert!(
        text.contains("written + dropped 18 = received - 2 abandoned"),
        "{text}"
    );
    assert!(
        text.contains("every drone at its newest position: 2 of 2"),
        "{text}"
    );
    // One replica without partitions (MQTT), a move that did not come, a drone behind.
    report.replicas = vec![replica("writer", ReplicaState::Running, &[])];
    report.partition_move.as_mut().unwrap().moved_after_secs = None;
    report.newest = Some(NewestCheck {
        drones: 2,
        at_newest: 1,
        behind: vec![("drone-1".to_owned(), 3, 4)],
        missing: Vec::new(),
    });
    let text = report.render();
    assert!(
        text.contains("replica writer: received 10   written 9   dropped 1\n"),
        "{text}"
    );
    assert!(text.contains("did NOT move within the run"), "{text}");
    assert!(
        text.contains("NOT every drone at its newest position: 1 of 2"),
        "{text}"
    );
}

#[test]
fn the_cost_shows_each_figure_beside_the_plan_and_the_worst_deviation() {
    let cost = CostComparison {
        settings: "indexing project, publish every 30 s".into(),
        drone_hours: 166.7,
        measured: PerDroneCost {
            ru_per_hour: 1_451.0,
            messages_per_day: 2_880.0,
            writes_per_hour: 132.0,
        },
        planned: PerDroneCost {
            ru_per_hour: 1_488.0,
            messages_per_day: 2_880.0,
            writes_per_hour: 120.0,
        },
        largest_message_bytes: 1_342,
        history: None,
    };
    assert!((cost.worst_deviation() - 0.1).abs() < 1e-9);
    let mut text = String::new();
    cost.render(&mut text);
    assert!(
        text.contains("publish every 30 s; 166.7 drone-hours"),
        "{text}"
    );
    assert!(text.contains("largest message 1342 bytes"), "{text}");
    let row = |name: &str| text.lines().find(|l| l.contains(name)).unwrap().to_owned();
    assert!(
        row("RU per drone-hour").contains("1451       1488  (-2.5 %)"),
        "{text}"
    );
    assert!(
        row("IoT Hub messages/drone-day").contains("(+0.0 %)"),
        "{text}"
    );
    assert!(row("writes per drone-hour").contains("(+10.0 %)"), "{text}");
    assert!(!text.contains("history"), "{text}");
    // With history: its RU and bytes beside the plan's, and in the worst deviation.
    let with_history = CostComparison {
        history: Some(HistoryCost {
            measured: HistoryPerDrone {
                ru_per_hour: 120.0,
                bytes_per_hour: 78_000.0,
            },
            planned: HistoryPerDrone {
                ru_per_hour: 92.5,
                bytes_per_hour: 81_132.0,
            },
        }),
        ..cost
    };
    let mut text = String::new();
    with_history.render(&mut text);
    let row = |name: &str| text.lines().find(|l| l.contains(name)).unwrap().to_owned();
    assert!(
        row("history RU per drone-hour").contains("120         92  (+29.7 %)"),
        "{text}"
    );
    assert!(
        row("history bytes/drone-hour").contains("78000      81132  (-3.9 %)"),
        "{text}"
    );
    assert!((with_history.worst_deviation() - 27.5 / 92.5).abs() < 1e-9);
}

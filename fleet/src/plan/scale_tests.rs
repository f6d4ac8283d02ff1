//! The plan at every size held to the published limits it cites (`deploy/limits.toml`):
//! Event Hubs partitions, DPS, Cosmos DB's physical partitions and quota, and the issue's
//! million drones with a week of history.

use std::time::Duration;

use super::cosmos::PartitionsBy;
use super::eventhubs::PartitionReason;
use super::tests::{fleet, prices, week};
use super::*;

/// The fleet: a million drones, batches of 30 s, written at most every 30 s.
fn million(history: Option<History>) -> Fleet {
    Fleet {
        publish_every: Duration::from_secs(30),
        min_write_interval: Duration::from_secs(30),
        history,
        control_plane: Some(ControlPlane::default()),
        ..fleet(1_000_000)
    }
}

#[test]
fn a_million_drones_keep_a_week_of_history_for_at_most_a_quarter_more_throughput() {
    let (p, l) = (prices(), Limits::shipped());
    let without = plan(&million(None), &p, &l);
    // The writer's defaults: segments of 2 minutes, each held its span and written once.
    let by_default = Some(History::segments(
        Duration::from_secs(7 * 86_400),
        cloud_writer::DEFAULT_SEGMENT_SPAN,
    ));
    let with = plan(&million(by_default), &p, &l);
    assert_eq!(without.cosmos.ru_per_sec, 516_700.0, "the issue's figure");
    assert!(
        with.cosmos.ru_per_sec <= 1.25 * without.cosmos.ru_per_sec,
        "{} against {}",
        with.cosmos.ru_per_sec,
        without.cosmos.ru_per_sec
    );
    // Where one document per position asked for 2,066,700 RU/s and 115 TB.
    assert!(
        with.cosmos.storage_gb < 115_000.0 / 5.0,
        "{:?}",
        with.cosmos
    );
    let text = text(&million(by_default), &with, &p, &l);
    for named in [
        "partitions per hub",
        "DPS ",
        "when every drone registers again",
        "keep their assignment",
        "physical partitions",
        "per drone-day",
    ] {
        assert!(text.contains(named), "{named} in {text}");
    }
    assert!(!text.contains("WARNING"), "{text}");
}

#[test]
fn the_plan_keeps_to_the_published_limits_it_cites() {
    let (p, l) = (prices(), Limits::shipped());
    for (name, source) in l.sources() {
        assert!(
            source.source.starts_with("https://learn.microsoft.com/"),
            "{name}: {source:?}"
        );
        assert_eq!(source.read.len(), 10, "{name}: {source:?}");
    }
    // The values the pages publish.
    assert_eq!(
        (l.iothub.default_partitions, l.iothub.max_partitions),
        (4, 32)
    );
    assert_eq!(l.eventhubs.events_per_partition_sec, 1_000.0);
    assert_eq!(l.eventhubs.bytes_per_partition_sec, 1_048_576.0);
    assert_eq!(l.dps.registrations_per_minute, 1_000.0);
    assert_eq!(
        (l.dps.max_registrations, l.dps.max_linked_hubs),
        (1_000_000, 50)
    );
    assert_eq!(l.cosmos.max_ru_per_container, 1_000_000.0);
    assert_eq!(l.cosmos.min_ru_per_gb, 1.0);
    assert_eq!(l.cosmos_partitions.ru_per_partition, 10_000.0);
    assert_eq!(l.cosmos_partitions.gb_per_partition, 50.0);
    for fleet in [
        fleet(1),
        fleet(1_000),
        million(None),
        million(week()),
        fleet(1_000_000),
        Fleet {
            report_interval: Duration::from_secs(1),
            history: week(),
            ..fleet(3_000_000)
        },
    ] {
        let plan = plan(&fleet, &p, &l);
        let (e, d, c) = (&plan.eventhubs, &plan.dps, &plan.cosmos);
        assert!(
            (l.iothub.default_partitions..=l.iothub.max_partitions).contains(&e.partitions),
            "{e:?}"
        );
        // A fleet beyond a hub's partitions spreads over more hubs.
        assert!(!matches!(e.reason, PartitionReason::Capped { .. }), "{e:?}");
        let partitions = e.partitions as f64;
        assert!(e.events_per_sec <= partitions * l.eventhubs.events_per_partition_sec);
        assert!(e.bytes_per_sec <= partitions * l.eventhubs.bytes_per_partition_sec);
        assert!(plan.writers.replicas <= e.partitions, "{plan:?}");
        assert!(
            fleet.drones <= d.instances * l.dps.max_registrations,
            "{d:?}"
        );
        assert!(
            plan.iothub.hubs <= d.instances * l.dps.max_linked_hubs,
            "{d:?}"
        );
        let registering = fleet.drones as f64 / (d.instances as f64 * 1_000.0) * 60.0;
        assert!(d.onboarding_secs >= registering, "{d:?}");
        let partitions = c.physical_partitions as f64;
        assert!(c.ru_per_sec <= partitions * l.cosmos_partitions.ru_per_partition);
        assert!(c.storage_gb <= partitions * l.cosmos_partitions.gb_per_partition);
        assert!(
            c.ru_per_sec >= c.storage_gb * l.cosmos.min_ru_per_gb,
            "{c:?}"
        );
        assert_eq!(
            c.needs_support_request,
            c.ru_per_sec > l.cosmos.max_ru_per_container
        );
    }
}

#[test]
fn partitions_follow_the_hubs_load_and_say_why() {
    let l = Limits::shipped();
    let small = eventhubs::plan(100.0, 1_000.0, 2, &l);
    assert_eq!(
        (small.partitions, small.reason),
        (4, PartitionReason::Default)
    );
    // 16,667 events/s of 1.2 KB: 17 partitions by events, 20 by bytes; 32 as a power of two.
    let large = eventhubs::plan(16_667.0, 1_200.0, 2, &l);
    assert_eq!(large.partitions, 32);
    assert_eq!(large.reason, PartitionReason::Load { needed: 20 });
    let writers = eventhubs::plan(100.0, 1_000.0, 6, &l);
    assert_eq!(
        (writers.partitions, writers.reason),
        (8, PartitionReason::Writers { replicas: 6 })
    );
    let capped = eventhubs::plan(40_000.0, 200.0, 2, &l);
    assert_eq!(
        (capped.partitions, capped.reason),
        (32, PartitionReason::Capped { needed: 40 })
    );
    assert!(capped.reason.text(&capped, &l).starts_with("WARNING"));
    // The fleet: two hubs of S3 take 16,667 events/s each.
    let million = plan(&million(None), &prices(), &l);
    assert_eq!(million.iothub.hubs, 2);
    assert_eq!(million.eventhubs.partitions, 32);
}

#[test]
fn onboarding_is_held_by_dps_unless_drones_keep_their_assignment() {
    let l = Limits::shipped();
    // A million drones on one instance at 1,000 registrations a minute: 1,000 minutes. Kept
    // assignments reconnect at two S3 hubs' 10 units × 6,000 new connections/s.
    let d = dps::plan(1_000_000, 2, 120_000.0, &l);
    assert_eq!(d.instances, 1);
    assert_eq!(d.onboarding_secs, 60_000.0);
    assert!((d.reconnect_secs - 1_000_000.0 / 120_000.0).abs() < 1e-9);
    assert_eq!(dps::duration_text(d.onboarding_secs), "16 h 40 min");
    assert_eq!(dps::duration_text(d.reconnect_secs), "9 s");
    // Beyond one instance's registrations, or its 50 linked hubs, another instance.
    assert_eq!(dps::plan(1_000_001, 2, 1e5, &l).instances, 2);
    assert_eq!(dps::plan(10, 51, 1e5, &l).instances, 2);
    // A small fleet's hub may be the slower: 100 new connections/s for 1,000 drones.
    let small = dps::plan(1_000, 1, 100.0, &l);
    assert_eq!((small.onboarding_secs, small.reconnect_secs), (60.0, 10.0));
    assert_eq!(dps::duration_text(7.0 * 86_400.0), "7 d");
    assert_eq!(dps::duration_text(300.0), "5 min");
}

#[test]
fn cosmos_partitions_follow_throughput_or_storage_and_a_large_container_needs_support() {
    let l = Limits::shipped();
    let busy = cosmos::plan(1_500_000.0, 1_200_000.0, 100.0, None, &l);
    assert_eq!(busy.physical_partitions, 150);
    assert_eq!(busy.partitions_by, PartitionsBy::Throughput);
    assert!(busy.needs_support_request);
    // 20 TB: 410 partitions of 50 GB, and at least 1 RU/s per GB.
    let large = cosmos::plan(1_000.0, 800.0, 20_480.0, None, &l);
    assert_eq!(large.physical_partitions, 410);
    assert_eq!(large.partitions_by, PartitionsBy::Storage);
    assert_eq!(large.ru_per_sec, 20_500.0);
    assert!(!large.needs_support_request);
    // A million drones reporting every 5 s, each written: past the quota, said in the text.
    let (p, fleet) = (prices(), fleet(1_000_000));
    let every = plan(&fleet, &p, &l);
    assert!(every.cosmos.needs_support_request, "{:?}", every.cosmos);
    assert!(text(&fleet, &every, &p, &l).contains("WARNING: past 1000000 RU/s per container"));
}

#[test]
fn a_limits_table_must_be_complete_and_positive() {
    let zero = limits::SHIPPED.replace("max_linked_hubs = 50", "max_linked_hubs = 0");
    let err = Limits::parse(&zero, "l.toml").unwrap_err();
    assert!(err.to_string().contains("dps.max_linked_hubs"), "{err}");
    let missing = limits::SHIPPED.replace("gb_per_partition = 50\n", "");
    assert!(Limits::parse(&missing, "l.toml").is_err());
}

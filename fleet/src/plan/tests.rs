//! The plan held to the published quotas and billing units it is built from.

use std::time::Duration;

use super::*;

pub(super) fn prices() -> Prices {
    let tiers: Vec<_> = TIERS.iter().map(|t| t.name).collect();
    Prices::parse(prices::SHIPPED, "deploy/prices.toml", &tiers).unwrap()
}

pub(super) fn planned(fleet: &Fleet, prices: &Prices) -> Plan {
    plan(fleet, prices, &Limits::shipped())
}

/// Kept a week in segments of five minutes, held as the writer holds them by default.
pub(super) fn week() -> Option<History> {
    Some(History::segments(
        Duration::from_secs(7 * 86_400),
        Duration::from_secs(300),
    ))
}

/// The same, each segment held its whole span and written once.
pub(super) fn week_written_once() -> Option<History> {
    week().map(|h| History {
        hold: h.segment_span,
        ..h
    })
}

pub(super) fn fleet(drones: u64) -> Fleet {
    Fleet {
        drones,
        report_interval: Duration::from_secs(5),
        publish_every: Duration::ZERO,
        min_write_interval: Duration::ZERO,
        history: None,
        regions: 1,
        read_ru_per_sec: 0.0,
        control_plane: None,
        indexing_policy: telemetry::indexing_policy(),
    }
}

#[test]
fn a_unit_of_the_first_tier_carries_23_drones_reporting_every_5_seconds() {
    // 17,280 messages a day per drone against B1's (and S1's) 400,000 per unit.
    let one = planned(&fleet(23), &prices());
    assert_eq!(
        (one.iothub.tier, one.iothub.units, one.iothub.hubs),
        ("B1", 1, 1)
    );
    assert_eq!(one.iothub.messages_per_day, 23.0 * 17_280.0);
    let two = planned(&fleet(24), &prices());
    assert_eq!((two.iothub.tier, two.iothub.units), ("B1", 2));
}

#[test]
fn the_cheapest_tier_wins_and_basic_only_when_allowed() {
    // 1,000 drones send 17.28 M messages a day: 44 S1 units, 3 S2 units or 1 S3 unit;
    // at the shipped prices 3 S2 units cost least.
    let standard = planned(&with_twin(1_000), &prices());
    assert_eq!((standard.iothub.tier, standard.iothub.units), ("S2", 3));
    let any = planned(&fleet(1_000), &prices());
    assert_eq!((any.iothub.tier, any.iothub.units), ("B2", 3));
    assert!(any.monthly_cost.iothub < standard.monthly_cost.iothub);
    // 10,000 drones: 172.8 M a day, within one S3 unit's 300 M.
    let large = planned(&with_twin(10_000), &prices());
    assert_eq!(
        (large.iothub.tier, large.iothub.units, large.iothub.hubs),
        ("S3", 1, 1)
    );
}

#[test]
fn the_send_throttle_adds_units_the_daily_quota_would_not() {
    // S1 allows the higher of 100 sends/s and 12 sends/s per unit.
    let tier = &TIERS[3];
    assert_eq!(tier.name, "S1");
    assert_eq!(tier.units(1_000.0, 600.0), 50);
    assert_eq!(
        tier.units(1_000.0, 100.0),
        1,
        "at least 100 sends/s per hub"
    );
    assert_eq!(tier.units(1_000.0, 101.0), 9);
}

#[test]
fn a_fleet_beyond_one_hubs_units_spreads_over_hubs() {
    let s1 = &TIERS[3];
    // 300 units of quota: two hubs of 150.
    assert_eq!(hubs_and_units(s1, 120_000_000.0, 1.0, 1), (2, 150));
    // More hubs when told: their units shrink.
    assert_eq!(hubs_and_units(s1, 120_000_000.0, 1.0, 3), (3, 100));
}

#[test]
fn throughput_is_billed_per_100_ru_per_hour_in_every_region_with_a_400_floor() {
    let p = prices();
    let small = planned(&fleet(1), &p);
    assert_eq!(small.cosmos.ru_per_sec, 400.0);
    // 1,000 drones: 200 patches/s, each changing 3 indexed terms under the project's policy
    // (5.0 + 5.0 + 0.2 × 3 + 0.2 × 3 + 0.4 × 3 = 12.4 RU), is 2,480 RU/s; a quarter more, in
    // steps of 100.
    let plan1 = planned(&fleet(1_000), &p);
    assert_eq!(plan1.cosmos.ru_per_sec, 3_100.0);
    assert_eq!(
        plan1.monthly_cost.cosmos_throughput,
        31.0 * p.cosmos.per_100_ru_hour * 730.0
    );
    let two_regions = planned(
        &Fleet {
            regions: 2,
            ..fleet(1_000)
        },
        &p,
    );
    assert_eq!(
        two_regions.monthly_cost.cosmos_throughput,
        2.0 * plan1.monthly_cost.cosmos_throughput
    );
}

#[test]
fn history_adds_one_create_per_segment_and_its_storage() {
    let p = prices();
    let with = planned(
        &Fleet {
            history: week_written_once(),
            ..fleet(1_000)
        },
        &p,
    );
    let without = planned(&fleet(1_000), &p);
    let h = with.cosmos.history.clone().unwrap();
    // Five minutes of positions every 5 s, written once: a create charged by the stored size
    // and 0.2 RU for each term the project's policy makes of a segment: `id` and `_ts`, and
    // those of its top-level fields the policy includes (the points are never indexed).
    let policy =
        cosmos_wire::indexing::IndexingPolicy::parse(&telemetry::indexing_policy()).unwrap();
    let terms = 2 + ["deviceId", "kind", "startMs", "endMs"]
        .iter()
        .filter(|path| policy.indexes(&[**path]))
        .count();
    assert!(!policy.indexes(&["points", "0", "0"]));
    assert_eq!((h.positions_per_segment, h.writes_per_segment), (60.0, 1.0));
    assert_eq!(
        h.ru_per_segment,
        cosmos_wire::charges::create(h.segment_bytes as usize, terms)
    );
    assert!(
        (4_096.0..16_384.0).contains(&h.segment_bytes),
        "well under the sizes whose charge grows fast: {h:?}"
    );
    let added = with.cosmos.write_ru_per_sec - without.cosmos.write_ru_per_sec;
    assert!(
        (added - 1_000.0 * h.ru_per_segment / 300.0).abs() < 1e-9,
        "{added}"
    );
    // Where one document per position (a create of 6.2 RU) cost 200 × 6.2 RU/s.
    assert!(added < 200.0 * 6.2 / 10.0, "{added}");
    assert_eq!(h.ru_per_drone_day, 288.0 * h.ru_per_segment);
    assert_eq!(with.per_drone.history_ru_per_hour, 12.0 * h.ru_per_segment);
    assert_eq!(
        with.per_drone.history_bytes_per_hour,
        12.0 * h.segment_bytes
    );
    // A week of segments, besides 1 KB per latest document.
    let gb = (1_000.0 * 1024.0 + 1_000.0 * 288.0 * 7.0 * h.segment_bytes) / (1u64 << 30) as f64;
    assert!((with.cosmos.storage_gb - gb).abs() < 1e-9);
}

#[test]
fn each_further_write_of_a_segment_costs_a_replace_of_its_old_and_new_size() {
    let p = prices();
    let held = |hold: u64| {
        let mut history = week().unwrap();
        history.hold = Duration::from_secs(hold);
        planned(
            &Fleet {
                publish_every: Duration::from_secs(30),
                history: Some(history),
                ..fleet(1_000)
            },
            &p,
        )
        .cosmos
        .history
        .unwrap()
    };
    let once = held(300);
    // The writer's default hold of 2 minutes: written at 2 and 4 minutes and when the drone
    // moves on, a create and two replaces, each replace charged the sizes before and after
    // (at least 5 RU each, the 1 KB row): more than four times the one create.
    let default = planned(
        &Fleet {
            publish_every: Duration::from_secs(30),
            history: week(),
            ..fleet(1_000)
        },
        &p,
    )
    .cosmos
    .history
    .unwrap();
    assert_eq!(default, held(120));
    assert_eq!(default.writes_per_segment, 3.0);
    assert!(
        default.ru_per_segment > 4.0 * once.ru_per_segment,
        "{default:?} against {once:?}"
    );
    // A hold shorter than a message's interval still writes at most once a message.
    let every_message = held(5);
    assert_eq!(every_message.writes_per_segment, 10.0);
    assert_eq!(held(60).writes_per_segment, 5.0);
    assert_eq!(every_message.segment_bytes, once.segment_bytes);
    assert!(every_message.ru_per_segment > 3.0 * default.ru_per_segment);
}

#[test]
fn writers_and_partitions_follow_the_load() {
    let p = prices();
    let small = planned(&fleet(1_000), &p);
    assert_eq!((small.writers.replicas, small.eventhubs.partitions), (2, 4));
    // 100,000 drones: 20,000 events/s at 0.125 ms is 2.5 cores.
    let large = planned(&fleet(100_000), &p);
    assert!((large.writers.cores - 2.5).abs() < 1e-9);
    // 10 s reports from 10 M drones: 1 M events/s, 125 cores over the hubs.
    let huge = planned(
        &Fleet {
            report_interval: Duration::from_secs(10),
            ..fleet(10_000_000)
        },
        &p,
    );
    let per_hub = huge.writers.cores / huge.iothub.hubs as f64;
    assert_eq!(huge.writers.replicas, (per_hub / 0.5).ceil() as u64);
    assert!(huge.eventhubs.partitions >= huge.writers.replicas.min(32));
}

#[test]
fn the_shipped_prices_name_their_source_and_date_and_a_bad_table_is_refused() {
    let p = prices();
    for provenance in [&p.iothub.provenance, &p.cosmos.provenance] {
        assert!(provenance.source.starts_with("https://"), "{provenance:?}");
        assert!(provenance.read.len() == 10, "{provenance:?}");
    }
    let missing = prices::SHIPPED.replace("S2 = 2544.00\n", "");
    let err = Prices::parse(&missing, "p.toml", &["S1", "S2"]).unwrap_err();
    assert!(err.to_string().contains("iothub.unit_month.S2"), "{err}");
    let unknown = format!("{}\nvat = 0.2\n", prices::SHIPPED);
    assert!(Prices::parse(&unknown, "p.toml", &["S1"]).is_err());
}

#[test]
fn the_json_has_the_fields_tools_read() {
    let json = serde_json::to_value(planned(&fleet(1_000), &prices())).unwrap();
    for pointer in [
        "/iothub/tier",
        "/iothub/units",
        "/iothub/hubs",
        "/eventhubs/partitions",
        "/writers/replicas",
        "/cosmos/ru_per_sec",
        "/monthly_cost/total",
        "/monthly_cost/currency",
    ] {
        assert!(json.pointer(pointer).is_some(), "{pointer} in {json}");
    }
}

#[test]
fn a_minimum_write_interval_cuts_the_latest_writes_not_the_history() {
    let p = prices();
    let every = planned(
        &Fleet {
            history: week(),
            ..fleet(1_000)
        },
        &p,
    );
    let spaced = planned(
        &Fleet {
            history: week(),
            min_write_interval: Duration::from_secs(30),
            ..fleet(1_000)
        },
        &p,
    );
    // 200 latest writes a second at 12.4 RU become 1,000 / 30; the history's segments stay.
    let history = 1_000.0 * every.per_drone.history_ru_per_hour / 3_600.0;
    assert!((every.cosmos.write_ru_per_sec - (200.0 * 12.4 + history)).abs() < 1e-6);
    assert!(
        (spaced.cosmos.write_ru_per_sec - (1_000.0 / 30.0 * 12.4 + history)).abs() < 1e-6,
        "{}",
        spaced.cosmos.write_ru_per_sec
    );
    // An interval shorter than the reports changes nothing.
    let short = planned(
        &Fleet {
            min_write_interval: Duration::from_secs(2),
            ..fleet(1_000)
        },
        &p,
    );
    assert_eq!(short.cosmos, planned(&fleet(1_000), &p).cosmos);
}

#[test]
fn batches_of_30_seconds_cut_messages_and_latest_writes_six_times_not_the_history() {
    let p = prices();
    let batched = planned(
        &Fleet {
            publish_every: Duration::from_secs(30),
            history: week(),
            ..fleet(1_000)
        },
        &p,
    );
    // Six samples of about 200 bytes in one message of IoT Hub's 4 KB.
    assert_eq!(batched.per_drone.messages_per_day, 17_280.0 / 6.0);
    assert_eq!(batched.iothub.sends_per_sec, 1_000.0 / 30.0);
    assert!((batched.per_drone.writes_per_hour - 120.0).abs() < 1e-9);
    let history = batched.per_drone.history_ru_per_hour;
    assert!(history > 0.0);
    assert!((batched.per_drone.ru_per_hour - (120.0 * 12.4 + history)).abs() < 1e-6);
    // Samples beyond one message's 4 KB take more messages: a publish every 5 minutes
    // carries 60 samples.
    let rare = planned(
        &Fleet {
            publish_every: Duration::from_secs(300),
            ..fleet(1_000)
        },
        &p,
    );
    let per_message = positions_per_message();
    assert!((15..=20).contains(&per_message), "{per_message}");
    assert_eq!(
        rare.per_drone.messages_per_day,
        288.0 * (60.0 / per_message as f64).ceil()
    );
}

#[test]
fn the_default_indexing_policy_costs_more_per_write() {
    let p = prices();
    let default = planned(
        &Fleet {
            indexing_policy: serde_json::json!({"indexingMode": "consistent", "includedPaths": [{"path": "/*"}], "excludedPaths": [{"path": "/\"_etag\"/?"}]}),
            ..fleet(1_000)
        },
        &p,
    );
    assert_eq!(default.per_drone.writes_per_hour, 720.0);
    // The project's policy charges at least 30 % less per write (12.4 RU a patch).
    let project = planned(&fleet(1_000), &p);
    assert!((project.per_drone.ru_per_hour - 720.0 * 12.4).abs() < 1e-6);
    assert!(
        project.per_drone.ru_per_hour <= 0.7 * default.per_drone.ru_per_hour,
        "{} against {}",
        project.per_drone.ru_per_hour,
        default.per_drone.ru_per_hour
    );
}

fn with_twin(drones: u64) -> Fleet {
    Fleet {
        control_plane: Some(ControlPlane::default()),
        ..fleet(drones)
    }
}

#[test]
fn the_control_plane_plans_the_standard_tier_and_says_what_it_adds() {
    // 1,000 drones: 17.28 M telemetry messages and 124,000 of the twin a day, within 3 S2
    // units' 18 M; without the twin 3 B2 units carry the same telemetry.
    let p = prices();
    let twin = planned(&with_twin(1_000), &p);
    assert_eq!((twin.iothub.tier, twin.iothub.units), ("S2", 3));
    let telemetry = planned(&fleet(1_000), &p);
    assert_eq!((telemetry.iothub.tier, telemetry.iothub.units), ("B2", 3));
    assert!(telemetry.control_plane.is_none());
    let c = twin.control_plane.clone().unwrap();
    assert_eq!(
        c.added_monthly_cost,
        3.0 * (p.iothub.unit_month["S2"] - p.iothub.unit_month["B2"])
    );
    assert_eq!(c.messages_per_day, 124_000.0);
    assert_eq!(twin.iothub.messages_per_day, 17_280_000.0 + 124_000.0);
    assert!((c.share_of_quota - 124_000.0 / 18_000_000.0).abs() < 1e-12);
    assert!((c.share_of_messages - 124_000.0 / 17_404_000.0).abs() < 1e-12);
    // The telemetry per drone is what the demo measures; the twin's is apart.
    assert_eq!(twin.per_drone, telemetry.per_drone);
    let text = text(&with_twin(1_000), &twin, &p, &Limits::shipped());
    assert!(
        text.contains("standard tier: the agent reads and reports its device twin"),
        "{text}"
    );
    assert!(text.contains("124 messages/drone-day"), "{text}");
}

#[test]
fn the_twins_messages_are_counted_against_the_daily_quota() {
    let p = prices();
    // 24 connections (a twin read each), 96 reported patches, one desired change (the
    // service's update, the notification, the acknowledgement, a read back): 124.
    let day = ControlPlane::default().messages(&p.iothub.metering);
    assert_eq!(
        (
            day.twin_reads,
            day.reported_patches,
            day.desired_changes,
            day.methods,
            day.total
        ),
        (24.0, 96.0, 4.0, 0.0, 124.0)
    );
    // A method call is its request and its response.
    let methods = ControlPlane {
        methods: 10.0,
        ..ControlPlane::default()
    };
    assert_eq!(methods.messages(&p.iothub.metering).methods, 20.0);
    // 23 drones fit one S1 unit's 400,000 messages with telemetry alone (397,440), not
    // with the twin's 2,852 more.
    assert_eq!(planned(&fleet(23), &p).iothub.units, 1);
    let twin = planned(&with_twin(23), &p);
    assert_eq!((twin.iothub.tier, twin.iothub.units), ("S1", 2));
    assert_eq!(planned(&with_twin(22), &p).iothub.units, 1);
    // The twin adds to the quota, not to the device-to-cloud send throttle.
    assert_eq!(twin.iothub.sends_per_sec, 23.0 / 5.0);
}

#[test]
fn the_metering_is_the_published_one() {
    // "Azure IoT Hub billing information": every billable operation in 4 KB blocks on the
    // basic and standard tiers. Its example 2: reading a 14 KB twin is 4 messages, a
    // 512-byte update 1; example 1: a method with a 512-byte request and a 200-byte
    // response is 2; a 6 KB message is 2.
    let m = prices().iothub.metering;
    assert!(
        m.provenance.source.ends_with("iot-hub-devguide-pricing"),
        "{m:?}"
    );
    assert_eq!(m.provenance.read.len(), 10);
    assert_eq!(m.block_bytes, 4096);
    assert_eq!(m.messages(14 * 1024), 4.0);
    assert_eq!(m.messages(512), 1.0);
    assert_eq!(m.messages(512) + m.messages(200), 2.0);
    assert_eq!(m.messages(6 * 1024), 2.0);
    assert_eq!(
        m.messages(0),
        1.0,
        "an empty operation is still one message"
    );
    let zero = prices::SHIPPED.replace("block_bytes = 4096", "block_bytes = 0");
    let err = Prices::parse(&zero, "p.toml", &["S1"]).unwrap_err();
    assert!(
        err.to_string().contains("iothub.metering.block_bytes"),
        "{err}"
    );
}

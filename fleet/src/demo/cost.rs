//! The demo's cost per drone: measured on the run (the endpoint's RU on the positions
//! container, the messages the hub took, the writers' latest-position writes, over the
//! drone-hours flown), and what `fleet plan` predicts for the same settings: for the drones
//! told a shorter report interval through their twins, the plan at each interval for the
//! share of the flight it held. With history, its RU (the endpoint's, on documents of kind
//! `history` or `segment`) and its bytes as stored, beside the plan's segments for the
//! demo's own flights (their length and phase, how often the drones reported).

use std::time::Duration;

use cloud_writer::Counts;

use cosmos_wire::indexing::IndexingPolicy;
use telemetry::document::segment_start;

use super::history::StoredHistory;
use super::observer::Published;
use super::{CONTAINER, DATABASE, DemoConfig, REPORT_INTERVAL};
use crate::plan;
use crate::report::{CostComparison, HistoryCost, HistoryPerDrone, PerDroneCost, RemoteConfig};

/// The history's segments, flight time: the writer's default span and hold.
const SEGMENT_SPAN: Duration = cloud_writer::DEFAULT_SEGMENT_SPAN;
/// The document kinds of history: one per position, and track segments.
const HISTORY_KINDS: [&str; 2] = ["history", "segment"];

/// The run's cost beside the plan's; `None` when no drone flew.
pub(super) fn compare(
    config: &DemoConfig,
    wall_secs: f64,
    published: &Published,
    writers: &Counts,
    stats: &cosmos_sim::Stats,
    stored_history: Option<&StoredHistory>,
    remote: Option<&RemoteConfig>,
) -> Option<CostComparison> {
    let drones = published.drones();
    if drones == 0 || wall_secs <= 0.0 {
        return None;
    }
    let drone_hours = drones as f64 * wall_secs * config.speedup / 3_600.0;
    let partitions = stats
        .container(DATABASE, CONTAINER)
        .map(|c| c.partitions.as_slice())
        .unwrap_or_default();
    let ru: f64 = partitions.iter().map(|p| p.ru_total).sum();
    let history_ru: f64 = partitions
        .iter()
        .flat_map(|p| HISTORY_KINDS.iter().filter_map(|k| p.ru_by_kind.get(*k)))
        .sum();
    let measured = PerDroneCost {
        ru_per_hour: ru / drone_hours,
        messages_per_day: published.messages as f64 / drone_hours * 24.0,
        writes_per_hour: writers.written as f64 / drone_hours,
    };
    let tiers: Vec<_> = plan::TIERS.iter().map(|t| t.name).collect();
    let prices = plan::Prices::parse(plan::prices::SHIPPED, "deploy/prices.toml", &tiers)
        .expect("the shipped price table parses");
    let history = config
        .history
        .map(|kept| plan::History::segments(kept, SEGMENT_SPAN));
    let limits = plan::Limits::shipped();
    let planned_at = |report_interval: Duration| {
        let fleet = plan::Fleet {
            drones: drones as u64,
            report_interval,
            publish_every: config
                .publish_every
                .unwrap_or(report_interval)
                .max(report_interval),
            min_write_interval: config.min_write_interval.unwrap_or_default(),
            history,
            regions: 1,
            read_ru_per_sec: 0.0,
            control_plane: Some(plan::ControlPlane::default()),
            indexing_policy: config.indexing.policy(),
        };
        plan::plan(&fleet, &prices, &limits).per_drone
    };
    let usual = planned_at(REPORT_INTERVAL);
    // The switched drones flew the rest of the flight at the new interval.
    let (share, after) = match remote.filter(|r| r.drones > 0) {
        Some(r) => {
            let rest = (1.0 - r.at_secs / wall_secs).clamp(0.0, 1.0);
            let new = planned_at(Duration::from_secs_f64(r.report_interval_s));
            (r.drones as f64 / drones as f64 * rest, new)
        }
        None => (0.0, usual.clone()),
    };
    let mix = |a: f64, b: f64| a * (1.0 - share) + b * share;
    let planned = plan::PerDrone {
        messages_per_day: mix(usual.messages_per_day, after.messages_per_day),
        writes_per_hour: mix(usual.writes_per_hour, after.writes_per_hour),
        ru_per_hour: mix(usual.ru_per_hour, after.ru_per_hour),
        history_ru_per_hour: mix(usual.history_ru_per_hour, after.history_ru_per_hour),
        history_bytes_per_hour: mix(usual.history_bytes_per_hour, after.history_bytes_per_hour),
    };
    Some(CostComparison {
        settings: settings(config),
        drone_hours,
        measured,
        planned: PerDroneCost {
            ru_per_hour: planned.ru_per_hour,
            messages_per_day: planned.messages_per_day,
            writes_per_hour: planned.writes_per_hour,
        },
        largest_message_bytes: published.largest_bytes,
        history: stored_history
            .zip(history)
            .map(|(stored, history)| HistoryCost {
                measured: HistoryPerDrone {
                    ru_per_hour: history_ru / drone_hours,
                    bytes_per_hour: stored.bytes as f64 / drone_hours,
                },
                planned: planned_history(config, &history, stored, drone_hours),
            }),
    })
}

/// The plan's history for the demo's flights, per drone-hour of the run: per drone, its
/// flight as its segments hold it (from its first position to its last, how often it
/// reported, where in the first stretch it began), under the writer's segments scaled to
/// flight time, the demo's publish interval and indexing policy.
fn planned_history(
    config: &DemoConfig,
    history: &plan::History,
    stored: &StoredHistory,
    drone_hours: f64,
) -> HistoryPerDrone {
    let policy = IndexingPolicy::parse(&config.indexing.policy())
        .expect("the demo's indexing policies parse");
    // The writer's stretches, wall time (device time is wall time here).
    let span_ms = (SEGMENT_SPAN.div_f64(config.speedup).as_millis() as i64).max(1);
    let flight_ms = |wall_ms: f64| Duration::from_secs_f64(wall_ms * config.speedup / 1_000.0);
    let (mut ru, mut bytes) = (0.0, 0.0);
    for drone in stored.flights.iter().filter(|f| f.positions > 0) {
        // n positions an interval apart cover n intervals.
        let n = drone.positions as f64;
        let between = (drone.last_ms - drone.first_ms) as f64;
        let interval_ms = if n > 1.0 { between / (n - 1.0) } else { 0.0 };
        let report_interval = if interval_ms > 0.0 {
            flight_ms(interval_ms)
        } else {
            REPORT_INTERVAL
        };
        let publish = config
            .publish_every
            .unwrap_or(report_interval)
            .max(report_interval);
        let phase = drone.first_ms - segment_start(drone.first_ms, span_ms);
        let flight = plan::history::Flight {
            length: report_interval.mul_f64(n),
            phase: Some(flight_ms(phase as f64)),
        };
        let cost = plan::history::plan_flight(history, report_interval, publish, &policy, flight);
        ru += cost.ru;
        bytes += cost.bytes;
    }
    HistoryPerDrone {
        ru_per_hour: ru / drone_hours,
        bytes_per_hour: bytes / drone_hours,
    }
}

/// The settings that change the cost, as the report names them.
fn settings(config: &DemoConfig) -> String {
    let mut parts = vec![format!(
        "indexing {}",
        match config.indexing {
            super::Indexing::Project => "project",
            super::Indexing::CosmosDefault => "cosmos-default",
        }
    )];
    if let Some(every) = config.publish_every {
        parts.push(format!("publish every {} s", every.as_secs_f64()));
    }
    if let Some(interval) = config.min_write_interval {
        parts.push(format!(
            "written at most every {} s",
            interval.as_secs_f64()
        ));
    }
    if config.history.is_some() {
        parts.push(format!(
            "history in segments of {} s",
            SEGMENT_SPAN.as_secs()
        ));
    }
    parts.join(", ")
}

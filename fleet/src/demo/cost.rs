//! The demo's cost per drone: measured on the run (the endpoint's RU on the positions
//! container, the messages the hub took, the writers' latest-position writes, over the
//! drone-hours flown), and what `fleet plan` predicts for the same settings.

use cloud_writer::Counts;

use super::observer::Published;
use super::{CONTAINER, DATABASE, DemoConfig, REPORT_INTERVAL};
use crate::plan;
use crate::report::{CostComparison, PerDroneCost};

/// The run's cost beside the plan's; `None` when no drone flew.
pub(super) fn compare(
    config: &DemoConfig,
    wall_secs: f64,
    published: &Published,
    writers: &Counts,
    stats: &cosmos_sim::Stats,
) -> Option<CostComparison> {
    let drones = published.drones();
    if drones == 0 || wall_secs <= 0.0 {
        return None;
    }
    let drone_hours = drones as f64 * wall_secs * config.speedup / 3_600.0;
    let ru: f64 = stats
        .container(DATABASE, CONTAINER)
        .map_or(0.0, |c| c.partitions.iter().map(|p| p.ru_total).sum());
    let measured = PerDroneCost {
        ru_per_hour: ru / drone_hours,
        messages_per_day: published.messages as f64 / drone_hours * 24.0,
        writes_per_hour: writers.written as f64 / drone_hours,
    };
    let tiers: Vec<_> = plan::TIERS.iter().map(|t| t.name).collect();
    let prices = plan::Prices::parse(plan::prices::SHIPPED, "deploy/prices.toml", &tiers)
        .expect("the shipped price table parses");
    let fleet = plan::Fleet {
        drones: drones as u64,
        report_interval: REPORT_INTERVAL,
        publish_every: config.publish_every.unwrap_or(REPORT_INTERVAL),
        min_write_interval: config.min_write_interval.unwrap_or_default(),
        history: None,
        regions: 1,
        read_ru_per_sec: 0.0,
        control_plane: Some(plan::ControlPlane::default()),
        indexing_policy: config.indexing.policy(),
    };
    let planned = plan::plan(&fleet, &prices).per_drone;
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
    })
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
    parts.join(", ")
}

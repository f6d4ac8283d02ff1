//! `fleet plan`: what to provision for a fleet and what it costs a month.
//!
//! Every number comes from one of three places, named where it is used: a quota Microsoft
//! publishes, a figure measured here (the command is in `docs/performance.md`), or the
//! dated price table ([`prices`]). What the plan does not know it does not price: the
//! writers' compute depends on where they run, so the plan gives their cores, not a cost.

mod control;
mod cosmos;
mod dps;
mod eventhubs;
pub mod history;
pub mod limits;
pub mod prices;
mod render;
#[cfg(test)]
mod scale_tests;
#[cfg(test)]
mod tests;

use std::time::Duration;

use cloud_writer::internals::policy_cost;
use cosmos_wire::indexing::IndexingPolicy;
use serde::Serialize;
use serde_json::Value;
use telemetry::DocumentLayout;
use telemetry::wire::{BatchBuilder, Position};

pub use control::{ControlPlane, ControlPlaneMessages};
pub use cosmos::CosmosPlan;
pub use dps::DpsPlan;
pub use eventhubs::EventHubsPlan;
pub use history::History;
pub use limits::Limits;
pub use prices::Prices;
pub use render::text;

/// The fleet to plan for.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// Drones.
    pub drones: u64,
    /// How often each drone samples its position.
    pub report_interval: Duration,
    /// The agent's `PUBLISH_EVERY`: each drone publishes the samples since its last
    /// publish in one batch every this often (zero, or the report interval: each sample
    /// alone).
    pub publish_every: Duration,
    /// The writer's `MIN_WRITE_INTERVAL`: each drone written at most once per this interval
    /// (zero: every position).
    pub min_write_interval: Duration,
    /// The writer's history of every position, in track segments, when it keeps one.
    pub history: Option<History>,
    /// Regions of the Cosmos DB account (throughput and storage are billed in each).
    pub regions: u32,
    /// Request units per second the read side spends (fleet-api, dashboards).
    pub read_ru_per_sec: f64,
    /// The device twin and direct methods, which the agent uses whenever it runs on IoT
    /// Hub: only the standard tiers have them, and their operations count against the
    /// daily quota. `None`: telemetry only, the basic tiers considered too.
    pub control_plane: Option<ControlPlane>,
    /// The container's indexing policy (what each write is charged for); the project's
    /// (`deploy/cosmos/indexing-policy.json`) unless told otherwise.
    pub indexing_policy: Value,
}

/// An IoT Hub tier and its published limits ("IoT Hub quotas and throttling"; the units per
/// hub from "Choose the right IoT Hub tier").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tier {
    /// Its name (`B1` ... `S3`).
    pub name: &'static str,
    /// Device-to-cloud telemetry only.
    pub basic: bool,
    /// Messages (4 KB chunks) a unit may send a day.
    pub messages_per_unit_day: u64,
    /// Units one hub may have.
    pub max_units: u64,
    /// The device-to-cloud send throttle.
    pub throttle: Throttle,
    /// The new-device-connection throttle (the quota table gives it the sends' figures).
    pub connections: Throttle,
}

/// A tier's throttle of device-to-cloud sends or new device connections: so many a second
/// per unit, and at least `at_least` per hub whatever its units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throttle {
    per_unit: f64,
    at_least: f64,
}

impl Throttle {
    /// Operations per second a hub of `units` allows.
    fn per_sec(self, units: u64) -> f64 {
        (self.per_unit * units as f64).max(self.at_least)
    }
}

/// Free, B1 and S1: the higher of 100 sends/s and 12 sends/s per unit.
const THROTTLE_1: Throttle = Throttle {
    per_unit: 12.0,
    at_least: 100.0,
};
/// B2 and S2: 120 sends/s per unit.
const THROTTLE_2: Throttle = Throttle {
    per_unit: 120.0,
    at_least: 0.0,
};
/// B3 and S3: 6,000 sends/s per unit.
const THROTTLE_3: Throttle = Throttle {
    per_unit: 6_000.0,
    at_least: 0.0,
};

/// IoT Hub's basic and standard tiers; the throttles are grouped the same way (B1 with
/// S1, B2 with S2, B3 with S3) in Microsoft's quota table ("IoT Hub quotas and throttling",
/// read 2026-11-28, the source `deploy/limits.toml` names).
pub const TIERS: [Tier; 6] = [
    Tier::new("B1", true, 400_000, 200, THROTTLE_1),
    Tier::new("B2", true, 6_000_000, 200, THROTTLE_2),
    Tier::new("B3", true, 300_000_000, 10, THROTTLE_3),
    Tier::new("S1", false, 400_000, 200, THROTTLE_1),
    Tier::new("S2", false, 6_000_000, 200, THROTTLE_2),
    Tier::new("S3", false, 300_000_000, 10, THROTTLE_3),
];

impl Tier {
    const fn new(
        name: &'static str,
        basic: bool,
        messages_per_unit_day: u64,
        max_units: u64,
        throttle: Throttle,
    ) -> Tier {
        Tier {
            name,
            basic,
            messages_per_unit_day,
            max_units,
            throttle,
            connections: throttle,
        }
    }

    /// The units one hub needs for `messages_per_day` sent at `sends_per_sec`.
    fn units(&self, messages_per_day: f64, sends_per_sec: f64) -> u64 {
        let quota = (messages_per_day / self.messages_per_unit_day as f64).ceil() as u64;
        let mut units = quota.max(1);
        while self.throttle.per_sec(units) < sends_per_sec {
            units += 1;
        }
        units
    }
}

/// The wire message of one position with every field, as the agent writes it (about 200
/// bytes).
fn position_message() -> Vec<u8> {
    Position {
        device_id: "drone-00042".into(),
        seq: 1_000_000,
        ts: chrono::DateTime::UNIX_EPOCH,
        lat: -33.868_820_123_456,
        lon: 151.209_296_123_456,
        alt_m: Some(121.512_345),
        heading_deg: Some(270.123_456),
        speed_mps: Some(12.345_678),
        battery_pct: Some(81),
        gnss: Default::default(),
    }
    .encode()
    .expect("a valid position")
}

/// How many positions fit in one batch (`telemetry::wire::BATCH_MAX_BYTES`), which IoT Hub
/// meters as one message (4 KB chunks, properties included).
fn positions_per_message() -> u64 {
    let message = position_message();
    let mut batch = BatchBuilder::new("drone-00042");
    while batch.fits(&message) {
        batch.push(&message);
    }
    batch.len() as u64
}

/// The writer's CPU per event from Event Hubs at a steady load: 0.125 ms (docs/performance.md,
/// the hour run on an idle machine: two replicas at 1,000 events/s each, one position per
/// event, `scripts/hour-run`). A writer draining a backlog takes larger batches and less
/// (20.75 µs, `cargo bench -p benches --bench writer_sources`); the plan takes the steady
/// figure, per position, which overstates a batch of several.
const WRITER_CPU_PER_EVENT: f64 = 125e-6;
/// A replica is given one core and planned to use half of it, leaving room for catching up
/// after an outage; two replicas at least, so that one can be replaced while the other reads.
const WRITER_CORE_UTILISATION: f64 = 0.5;
const MIN_WRITERS: u64 = 2;

/// Provisioned throughput above the steady load, for bursts after an outage (a quarter).
const RU_HEADROOM: f64 = 1.25;
/// A latest-position document with its index entries, an upper bound: it is about 600
/// bytes.
const DOCUMENT_BYTES: f64 = 1024.0;
const GB: f64 = (1u64 << 30) as f64;
/// Hours in an average month (8,760 / 12).
const HOURS_PER_MONTH: f64 = 730.0;

/// What to provision and what it costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// What one drone costs: the figures the demo measures.
    pub per_drone: PerDrone,
    /// IoT Hub.
    pub iothub: IotHubPlan,
    /// The hubs' built-in Event Hubs endpoints.
    pub eventhubs: EventHubsPlan,
    /// The Device Provisioning Service.
    pub dps: DpsPlan,
    /// The cloud writers.
    pub writers: WritersPlan,
    /// Cosmos DB.
    pub cosmos: CosmosPlan,
    /// The device twin and direct methods, when planned for.
    pub control_plane: Option<ControlPlanePlan>,
    /// The month's cost.
    pub monthly_cost: MonthlyCost,
}

/// The twin's and methods' share of IoT Hub's daily quota.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControlPlanePlan {
    /// What a drone's day of twin and method operations is charged, in messages.
    pub per_drone: ControlPlaneMessages,
    /// The fleet's, a day.
    pub messages_per_day: f64,
    /// Their share of all the messages the fleet sends (0 to 1).
    pub share_of_messages: f64,
    /// Their share of the daily quota of the hubs planned (0 to 1).
    pub share_of_quota: f64,
    /// What IoT Hub costs a month more than the cheapest hubs for the telemetry alone
    /// (the standard tier and the twin's messages).
    pub added_monthly_cost: f64,
}

/// What one drone costs, whatever the fleet's size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerDrone {
    /// IoT Hub messages (4 KB chunks) of telemetry a day.
    pub messages_per_day: f64,
    /// Writes of its latest-position document an hour.
    pub writes_per_hour: f64,
    /// Request units its writes spend an hour (latest document and history).
    pub ru_per_hour: f64,
    /// Of which its history's (zero without history).
    pub history_ru_per_hour: f64,
    /// Bytes its history adds an hour (zero without history).
    pub history_bytes_per_hour: f64,
}

/// IoT Hub: the tier, the units of each hub, and the hubs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IotHubPlan {
    /// The tier.
    pub tier: &'static str,
    /// Units of each hub.
    pub units: u64,
    /// Hubs (a fleet beyond one hub's units spreads over several, through DPS).
    pub hubs: u64,
    /// Messages the fleet is charged a day (4 KB chunks): telemetry, and the twin's and
    /// methods' when planned for.
    pub messages_per_day: f64,
    /// Device-to-cloud sends per second, all hubs.
    pub sends_per_sec: f64,
}

/// The cloud writers of each hub.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WritersPlan {
    /// Replicas reading each hub.
    pub replicas: u64,
    /// Cores the writers of all hubs use at the steady load.
    pub cores: f64,
}

/// The month's cost, in the price table's currency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MonthlyCost {
    /// IoT Hub units.
    pub iothub: f64,
    /// Cosmos DB provisioned throughput.
    pub cosmos_throughput: f64,
    /// Cosmos DB storage.
    pub cosmos_storage: f64,
    /// All of it (the writers' compute is not priced).
    pub total: f64,
    /// The currency.
    pub currency: String,
}

/// Plans `fleet` with `prices` within `limits`.
pub fn plan(fleet: &Fleet, prices: &Prices, limits: &Limits) -> Plan {
    let interval = fleet.report_interval.as_secs_f64();
    let positions_per_sec = fleet.drones as f64 / interval;
    // A publish carries every sample since the last one, in as many 4 KB messages as it
    // takes (the agent starts a new one when the next sample might not fit).
    let publish_interval = interval.max(fleet.publish_every.as_secs_f64());
    let samples_per_publish = (publish_interval / interval).floor().max(1.0);
    let messages_per_publish = (samples_per_publish / positions_per_message() as f64).ceil();
    let sends_per_sec = fleet.drones as f64 * messages_per_publish / publish_interval;
    let telemetry_per_day =
        fleet.drones as f64 * messages_per_publish * 86_400.0 / publish_interval;
    // Twin and method operations count against the daily quota, not the device-to-cloud
    // send throttle.
    let control = fleet
        .control_plane
        .map(|c| c.messages(&prices.iothub.metering));
    let control_per_day = control.map_or(0.0, |c| c.total * fleet.drones as f64);
    let messages_per_day = telemetry_per_day + control_per_day;

    // Each hub's endpoint has at most so many partitions, each taking so much and read by one
    // writer replica: a fleet beyond that spreads over more hubs.
    let cores = positions_per_sec * WRITER_CPU_PER_EVENT;
    let bytes_per_event =
        samples_per_publish * position_message().len() as f64 / messages_per_publish;
    let min_hubs = eventhubs::hubs_needed(
        sends_per_sec,
        bytes_per_event,
        cores / WRITER_CORE_UTILISATION,
        limits,
    );
    let standard_only = fleet.control_plane.is_some();
    let (tier, hubs, units, iothub_cost) = cheapest_hubs(
        standard_only,
        messages_per_day,
        sends_per_sec,
        min_hubs,
        prices,
    );

    let replicas = ((cores / hubs as f64 / WRITER_CORE_UTILISATION).ceil() as u64).max(MIN_WRITERS);
    let eventhubs = eventhubs::plan(
        sends_per_sec / hubs as f64,
        bytes_per_event,
        replicas,
        limits,
    );
    let dps = dps::plan(
        fleet.drones,
        hubs,
        hubs as f64 * tier.connections.per_sec(units),
        limits,
    );

    // What Cosmos DB charges the writer's documents under the indexing policy it creates the
    // container with (deploy/cosmos/indexing-policy.json): a drone's new position is a patch
    // of its latest document ("Understand request unit consumption": size and indexed terms;
    // `cloud-writer check` says the same); history as in [`history`].
    let charges = policy_cost(&fleet.indexing_policy, &DocumentLayout::default())
        .expect("an indexing policy checked when read");
    let policy = IndexingPolicy::parse(&fleet.indexing_policy).expect("checked when read");
    let history = fleet.history.map(|h| {
        let publish = std::time::Duration::from_secs_f64(publish_interval);
        history::plan(&h, fleet.report_interval, publish, &policy)
    });
    let drones = fleet.drones as f64;
    let history_ru = history
        .as_ref()
        .map_or(0.0, |h| drones * h.ru_per_drone_day / 86_400.0);
    // A drone's latest document is written once per message: the writer keeps the newest
    // position of a batch. With MIN_WRITE_INTERVAL at most once per interval. Its history
    // still gets every position.
    let latest_writes_per_sec = drones
        / (publish_interval / messages_per_publish).max(fleet.min_write_interval.as_secs_f64());
    let write_ru_per_sec = latest_writes_per_sec * charges.ru_per_position + history_ru;
    let history_gb = match (&history, fleet.history) {
        (Some(h), Some(kept)) => {
            drones * h.bytes_per_drone_day * kept.kept.as_secs_f64() / 86_400.0 / GB
        }
        _ => 0.0,
    };
    let storage_gb = drones * DOCUMENT_BYTES / GB + history_gb;
    let cosmos = cosmos::plan(
        (write_ru_per_sec + fleet.read_ru_per_sec) * RU_HEADROOM,
        write_ru_per_sec,
        storage_gb,
        history,
        limits,
    );

    let regions = f64::from(fleet.regions.max(1));
    let cosmos_throughput = cosmos.ru_per_sec / cosmos::RU_STEP
        * prices.cosmos.per_100_ru_hour
        * HOURS_PER_MONTH
        * regions;
    let cosmos_storage = storage_gb * prices.cosmos.per_gb_month * regions;
    Plan {
        per_drone: PerDrone {
            messages_per_day: telemetry_per_day / drones,
            writes_per_hour: latest_writes_per_sec * 3_600.0 / drones,
            ru_per_hour: write_ru_per_sec * 3_600.0 / drones,
            history_ru_per_hour: cosmos
                .history
                .as_ref()
                .map_or(0.0, |h| h.ru_per_drone_day / 24.0),
            history_bytes_per_hour: cosmos
                .history
                .as_ref()
                .map_or(0.0, |h| h.bytes_per_drone_day / 24.0),
        },
        iothub: IotHubPlan {
            tier: tier.name,
            units,
            hubs,
            messages_per_day,
            sends_per_sec,
        },
        eventhubs,
        dps,
        control_plane: control.map(|per_drone| ControlPlanePlan {
            per_drone,
            messages_per_day: control_per_day,
            share_of_messages: control_per_day / messages_per_day,
            share_of_quota: control_per_day / (hubs * units * tier.messages_per_unit_day) as f64,
            added_monthly_cost: iothub_cost
                - cheapest_hubs(false, telemetry_per_day, sends_per_sec, min_hubs, prices).3,
        }),
        writers: WritersPlan { replicas, cores },
        cosmos,
        monthly_cost: MonthlyCost {
            iothub: iothub_cost,
            cosmos_throughput,
            cosmos_storage,
            total: iothub_cost + cosmos_throughput + cosmos_storage,
            currency: prices.currency.clone(),
        },
    }
}

/// The cheapest tier (standard only, or any) for the load: the tier, its hubs, units of
/// each, and their price a month.
fn cheapest_hubs(
    standard_only: bool,
    messages_per_day: f64,
    sends_per_sec: f64,
    min_hubs: u64,
    prices: &Prices,
) -> (&'static Tier, u64, u64, f64) {
    TIERS
        .iter()
        .filter(|t| !(standard_only && t.basic))
        .map(|tier| {
            let (hubs, units) = hubs_and_units(tier, messages_per_day, sends_per_sec, min_hubs);
            let price = prices.iothub.unit_month[tier.name];
            (tier, hubs, units, (hubs * units) as f64 * price)
        })
        .min_by(|a, b| a.3.total_cmp(&b.3).then(a.1.cmp(&b.1)))
        .expect("at least the standard tiers")
}

/// The fewest hubs of `tier` (at least `min_hubs`) that carry the load, and the units each
/// needs.
fn hubs_and_units(
    tier: &Tier,
    messages_per_day: f64,
    sends_per_sec: f64,
    min_hubs: u64,
) -> (u64, u64) {
    let mut hubs = min_hubs.max(1);
    loop {
        let units = tier.units(messages_per_day / hubs as f64, sends_per_sec / hubs as f64);
        if units <= tier.max_units {
            return (hubs, units);
        }
        hubs += 1;
    }
}

//! The planner's settings: the fleet, its agents' and writers' cadences, the history kept,
//! the control plane's traffic, and the price table and limits planned with.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use fleet::{ControlPlane, Fleet, History, Limits, Prices};
use settings::DurationSetting;

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Switch {
    On,
    Off,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Drones in the fleet.
    #[arg(long)]
    drones: u64,
    /// How often each drone reports its position (the agent's REPORT_INTERVAL).
    #[arg(long, default_value = "5s")]
    report_interval: DurationSetting,
    /// The agent's PUBLISH_EVERY: the samples since the last publish in one message every
    /// this often (e.g. `30s`) [default: every sample alone]
    #[arg(long)]
    publish_every: Option<DurationSetting>,
    /// The container's indexing policy, a JSON file (the `indexingPolicy` of `az cosmosdb
    /// sql container show`) [default: the project's, deploy/cosmos/indexing-policy.json]
    #[arg(long)]
    indexing_policy: Option<PathBuf>,
    /// The writer's MIN_WRITE_INTERVAL: each drone written at most once per this interval
    /// (e.g. `30s`) [default: every position]
    #[arg(long)]
    min_write_interval: Option<DurationSetting>,
    /// Keep the history of every position for this long (the writer's history in track
    /// segments, with its HISTORY_TTL), e.g. `7d`.
    #[arg(long)]
    history: Option<DurationSetting>,
    /// With --history: the stretch of device time one segment holds (the writer's
    /// HISTORY_SEGMENT_SPAN).
    #[arg(long, default_value = "2m", requires = "history")]
    segment_span: DurationSetting,
    /// With --history: the longest the writer holds a position for its segment's write (the
    /// writer's HISTORY_HOLD; the segment span: one write per segment) [default: 2m, at most
    /// the span]
    #[arg(long, requires = "history")]
    history_hold: Option<DurationSetting>,
    /// Regions of the Cosmos DB account.
    #[arg(long, default_value_t = 1)]
    regions: u32,
    /// Request units per second the read side spends (fleet-api, dashboards).
    #[arg(long, default_value_t = 0.0)]
    read_ru_per_sec: f64,
    /// The device twin and direct methods: `on` (the agent reads and reports its twin
    /// whenever it runs on IoT Hub) plans the standard tier and counts their messages;
    /// `off` plans telemetry only and considers the basic tier too.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    control_plane: Switch,
    /// Connections a drone makes a day (each reads the whole twin).
    #[arg(long, default_value_t = ControlPlane::default().reconnections)]
    reconnections_per_day: f64,
    /// Reported patches of its state a drone sends a day (at most 1,440 with the agent's
    /// REPORTED_MIN_INTERVAL of 60s).
    #[arg(long, default_value_t = ControlPlane::default().reported_patches)]
    reported_patches_per_day: f64,
    /// Desired-property changes per drone a day.
    #[arg(long, default_value_t = ControlPlane::default().desired_changes)]
    desired_changes_per_day: f64,
    /// Direct method calls per drone a day.
    #[arg(long, default_value_t = ControlPlane::default().methods)]
    methods_per_day: f64,
    /// The price table [default: the shipped deploy/prices.toml].
    #[arg(long)]
    prices: Option<PathBuf>,
    /// The published limits planned with, a copy of deploy/limits.toml with those Microsoft
    /// raised for this subscription [default: the shipped deploy/limits.toml].
    #[arg(long)]
    limits: Option<PathBuf>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
}

/// What to plan and with which prices and limits.
#[derive(Debug)]
pub struct Plan {
    /// The fleet planned for.
    pub fleet: Fleet,
    /// The price table.
    pub prices: Prices,
    /// The published limits.
    pub limits: Limits,
    /// Print the plan as JSON instead of text.
    pub json: bool,
}

impl PlanArgs {
    /// The plan's inputs: the price table and limits read, the indexing policy read and
    /// costed, every figure checked.
    pub fn plan(self) -> anyhow::Result<Plan> {
        let tiers: Vec<_> = fleet::TIERS.iter().map(|t| t.name).collect();
        let prices = match &self.prices {
            Some(path) => Prices::read(path, &tiers)?,
            None => Prices::parse(fleet::SHIPPED_PRICES, "deploy/prices.toml", &tiers)?,
        };
        let limits = match &self.limits {
            Some(path) => Limits::read(path)?,
            None => Limits::shipped(),
        };
        anyhow::ensure!(self.drones > 0, "--drones must be at least 1");
        for (flag, value) in [
            ("--reconnections-per-day", self.reconnections_per_day),
            ("--reported-patches-per-day", self.reported_patches_per_day),
            ("--desired-changes-per-day", self.desired_changes_per_day),
            ("--methods-per-day", self.methods_per_day),
        ] {
            anyhow::ensure!(
                value >= 0.0 && value.is_finite(),
                "{flag} must be a number of 0 or more, e.g. 24"
            );
        }
        let report_interval = self.report_interval.get();
        let segment_span = self.segment_span.get();
        let history_hold = self.history_hold.map(DurationSetting::get);
        anyhow::ensure!(
            !report_interval.is_zero(),
            "--report-interval must be longer than 0, e.g. 5s"
        );
        let publish_every = self
            .publish_every
            .map_or(report_interval, DurationSetting::get);
        anyhow::ensure!(
            segment_span >= report_interval,
            "--segment-span must be at least --report-interval ({report_interval:?}), e.g. 5m"
        );
        anyhow::ensure!(
            history_hold.is_none_or(|hold| hold <= segment_span),
            "--history-hold must be at most --segment-span ({segment_span:?}), as the writer's HISTORY_HOLD, e.g. 2m"
        );
        anyhow::ensure!(
            publish_every >= report_interval,
            "--publish-every must be at least --report-interval ({report_interval:?}), e.g. 30s"
        );
        let indexing_policy = match &self.indexing_policy {
            None => telemetry::indexing_policy(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("--indexing-policy {}", path.display()))?;
                let policy: serde_json::Value = serde_json::from_str(&text)
                    .with_context(|| format!("--indexing-policy {}: not JSON", path.display()))?;
                cloud_writer::internals::policy_cost(
                    &policy,
                    &telemetry::DocumentLayout::default(),
                )
                .map_err(|e| anyhow::anyhow!("--indexing-policy {}: {e}", path.display()))?;
                policy
            }
        };
        let fleet = Fleet {
            drones: self.drones,
            report_interval,
            publish_every,
            min_write_interval: self
                .min_write_interval
                .map(DurationSetting::get)
                .unwrap_or_default(),
            history: self.history.map(|kept| History {
                kept: kept.get(),
                segment_span,
                hold: history_hold.unwrap_or(fleet::DEFAULT_HISTORY_HOLD.min(segment_span)),
            }),
            regions: self.regions,
            read_ru_per_sec: self.read_ru_per_sec,
            control_plane: (self.control_plane == Switch::On).then_some(ControlPlane {
                reconnections: self.reconnections_per_day,
                reported_patches: self.reported_patches_per_day,
                desired_changes: self.desired_changes_per_day,
                methods: self.methods_per_day,
            }),
            indexing_policy,
        };
        Ok(Plan {
            fleet,
            prices,
            limits,
            json: self.json,
        })
    }
}

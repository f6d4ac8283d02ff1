//! The fleet tool: the demo that runs the whole pipeline on one machine, the load
//! generator and the capacity planner.
//!
//! - `api`: the read API and the live map, served in-process while the demo runs.
//! - `broker`: the embedded MQTT broker (or Mosquitto) the drones publish to with `--hub mqtt`.
//! - `demo`: the demo orchestration (local IoT Hub, writer replicas, drones, the
//!   scenarios, the alerts); `report`: its final report.
//! - `loadgen`: N drones at a rate against any MQTT broker, bounded in count and time.
//! - `onboard`: a simulated fleet registering through DPS, as the edge agent does.
//! - `plan`: what to provision for a fleet and what it costs a month.
//! - `prom`: reading Prometheus text (the writer's metrics).
//! - `writer_metrics`: the writer's field metrics between two scrapes.
//! - `twin`: a service client for IoT Hub's device twins.
//! - `view`: the live terminal view of a run.

mod api;
mod broker;
mod demo;
mod loadgen;
mod onboard;
mod plan;
mod prom;
mod remote_config;
mod report;
mod twin;
mod view;
mod writer_metrics;

pub use broker::{Broker, BrokerKind};
pub use demo::{
    AlertsConfig, BALANCING_INTERVAL, CONTAINER, DATABASE, DEVICE_KEY, DemoConfig, HubKind,
    Indexing, Output, Scenario, device_id, run as run_demo, switched, wait_until_subscribed,
    writer_config,
};
pub use loadgen::{LoadgenConfig, Target, run as run_loadgen};
pub use plan::history::DEFAULT_HOLD as DEFAULT_HISTORY_HOLD;
pub use plan::prices::SHIPPED as SHIPPED_PRICES;
pub use plan::{ControlPlane, Fleet, History, Limits, Prices, TIERS, plan, text as plan_text};
pub use prom::{Scrape, bucket_delta, quantile};
pub use report::{AlertReport, CostComparison, DemoReport, ReceivedAlert};
pub use view::ReplicaState;
pub use writer_metrics::{WriterFigures, WriterScraper};

//! The fleet tool: the demo that runs the whole pipeline on one machine, the load
//! generator and the capacity planner.
//!
//! - [`api`]: the read API and the live map, served in-process while the demo runs.
//! - [`broker`]: the embedded MQTT broker (or Mosquitto) the drones publish to with `--hub mqtt`.
//! - [`demo`]: the demo orchestration (local IoT Hub, writer replicas, drones, the
//!   scenarios); [`report`]: its final report.
//! - [`loadgen`]: N drones at a rate against any MQTT broker, bounded in count and time.
//! - [`onboard`]: a simulated fleet registering through DPS, as the edge agent does.
//! - [`plan`]: what to provision for a fleet and what it costs a month.
//! - [`prom`]: reading Prometheus text (the writer's metrics).
//! - [`writer_metrics`]: the writer's field metrics between two scrapes.
//! - [`twin`]: a service client for IoT Hub's device twins and direct methods.
//! - [`view`]: the live terminal view of a run.

pub mod api;
pub mod broker;
pub mod demo;
pub mod loadgen;
pub mod onboard;
pub mod plan;
pub mod prom;
pub mod remote_config;
pub mod report;
pub mod twin;
pub mod view;
pub mod writer_metrics;

//! The binary's settings: the command line and the environment, one file per subcommand,
//! each turning its flags into the typed values the library runs on. `demo.rs` holds the
//! demo's settings and makes its [`DemoConfig`](fleet::DemoConfig); `loadgen.rs` the load
//! generator's, its [`Target`](fleet::Target) and [`LoadgenConfig`](fleet::LoadgenConfig);
//! `plan.rs` the planner's, the [`Fleet`](fleet::Fleet) planned with its prices and limits.

mod demo;
mod loadgen;
mod plan;

use clap::{Parser, Subcommand};

pub use demo::{Demo, DemoArgs};
pub use loadgen::{Loadgen, LoadgenArgs};
pub use plan::{Plan, PlanArgs};

/// Drone fleet telemetry: the demo and the load generator.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole pipeline here: local IoT Hub (or an MQTT broker), local Cosmos
    /// endpoint, simulated fleet, cloud writer replicas; show it live and report.
    Demo(DemoArgs),
    /// Publish N simulated drones' positions at a rate to an MQTT broker and report.
    Loadgen(LoadgenArgs),
    /// What to provision for a fleet (IoT Hub, Event Hubs partitions, writers, Cosmos DB)
    /// and what it costs a month, from published quotas, the figures measured here and a
    /// dated price table.
    Plan(PlanArgs),
}

//! The binary's settings: the command line and the environment. `run.rs` holds the
//! server's settings and turns them into a [`HubConfig`](hub_sim::HubConfig);
//! `commands.rs` the subcommands that edit a state directory.

mod commands;
mod run;

use clap::{Parser, Subcommand};

pub use commands::{DeviceCommand, EnrollmentCommand};
pub use run::RunArgs;

/// A local IoT Hub: devices over MQTT (TLS, WebSockets; SAS or X.509), the built-in
/// Event Hubs endpoint over AMQP.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage devices in a state directory.
    #[command(subcommand)]
    Device(DeviceCommand),
    /// Manage the provisioning service's enrollments in a state directory.
    #[command(subcommand)]
    Enrollment(EnrollmentCommand),
}

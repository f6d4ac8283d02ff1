//! The subcommands that edit a state directory: devices and enrollments.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum EnrollmentCommand {
    /// Enrolls a group; a symmetric-key group's primary key is printed on standard output
    /// (a member's key is base64(HMAC-SHA256(base64decode(key), registration id))).
    Add {
        /// The hub's state directory.
        #[arg(long, env = "HUB_SIM_STATE_DIR")]
        state_dir: PathBuf,
        /// The enrollment group's name.
        #[arg(long)]
        group: String,
        /// An X.509 group: the CA or intermediate certificate (PEM file) members' chains lead to.
        #[arg(long)]
        x509_ca: Option<PathBuf>,
        /// Enroll it disabled (its members are refused).
        #[arg(long)]
        disabled: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DeviceCommand {
    /// Registers a device and prints its connection string (SAS) or registers a thumbprint.
    Add {
        /// The hub's state directory.
        #[arg(long, env = "HUB_SIM_STATE_DIR")]
        state_dir: PathBuf,
        /// Register an X.509 device by its certificate's SHA-256 thumbprint (hex) instead.
        #[arg(long)]
        x509_thumbprint: Option<String>,
        /// The device id.
        id: String,
    },
}

//! Local peer processes on free ports of 127.0.0.1, stopped when their handle drops.
//! The demo runs its Mosquitto from here; test-harness builds its peers on the same
//! plumbing.
//!
//! - `mosquitto.rs`: [`Mosquitto`], the system's Mosquitto broker with a generated
//!   config, its own data directory and log (`apt-get install mosquitto`).
//! - `process.rs`: finding programs, spawning children that die with this process, free
//!   ports, signals and bounded waits.
//! - `error.rs`: [`PeerError`], why a peer did not start or stop; its message says what
//!   to do.
//!
//! Children are spawned with `PR_SET_PDEATHSIG`, so they also die when this process is
//! killed and no `Drop` runs.

mod error;
mod mosquitto;
mod process;

pub use error::PeerError;
pub use mosquitto::{Mosquitto, MosquittoConfig, TlsListener, write_password_file};
pub use process::{
    Program, Readiness, command, free_port, kill_and_reap, read_log, signal, spawn, wait_for_exit,
    wait_until, wait_until_accepting,
};

//! Real peers for tests, started on free ports of 127.0.0.1 and stopped when their
//! handle drops, also when a test panics:
//! - [`Mosquitto`]: the system's Mosquitto broker with a generated config, its own data
//!   directory and log (`apt-get install mosquitto`); local-peers' broker, which the demo
//!   also runs.
//! - [`CosmosDbServer`]: `@vercel/cosmosdb-server` from `tools/node`
//!   (`apt-get install nodejs npm`, then `npm ci --prefix tools/node`); and
//!   [`run_sdk_script`], a node script with the official SDKs against an endpoint.
//! - [`Azurite`]: Microsoft's Azure Storage emulator (Blob service) from `tools/node`.
//! - [`Chromium`]: Debian's `chromium`, headless, to dump a page's DOM or screenshot it
//!   (`apt-get install chromium`).
//! - [`geo`]: a great-circle distance written apart from the servers', to check their
//!   spatial answers.
//! - [`manifests`]: the Kubernetes manifests of `deploy/` as YAML, and the keyless-access
//!   check the programs' deploy tests share.
//! - [`eventually`]: the one way a test waits for a condition it cannot be told of.
//!
//! A missing program or package is an error that says how to install it; nothing is
//! skipped. The peers are synchronous (std::process), so they work from plain and from
//! async tests; starting a peer blocks the calling thread until the peer is ready
//! (at most a few seconds).
//!
//! Children are spawned with `PR_SET_PDEATHSIG`, so they also die when the test process
//! is killed and no `Drop` runs.

mod azurite;
mod chromium;
mod cosmosdb;
mod eventually;
pub mod geo;
pub mod manifests;
mod process;

pub use azurite::Azurite;
pub use chromium::Chromium;
pub use cosmosdb::{CosmosDbServer, node_bin, node_dir, run_sdk_script};
pub use eventually::{eventually, eventually_blocking};
pub use local_peers::{Mosquitto, MosquittoConfig, PeerError, TlsListener, write_password_file};
pub use process::{free_udp_port, process_running};

//! `cosmos-sim`: the local Cosmos DB endpoint as a standalone server.

use anyhow::Context as _;
use clap::Parser;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// A local Cosmos DB endpoint with request units, partitions, throttling and fault injection.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Port to listen on.
    #[arg(long, env = "COSMOS_SIM_PORT", default_value_t = 8081)]
    port: u16,
    /// Address to bind.
    #[arg(long, env = "COSMOS_SIM_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Account key, base64 (default: the emulator's well-known key). Prefer the environment
    /// variable: command lines are visible to other users.
    #[arg(long, env = "COSMOS_SIM_KEY", hide_env_values = true)]
    key: Option<String>,
    /// Physical partitions (ranges) per new container.
    #[arg(long, env = "COSMOS_SIM_PARTITIONS", default_value_t = 4)]
    partitions: usize,
    /// Provisioned RU/s per new container, split evenly across its partitions.
    #[arg(long, env = "COSMOS_SIM_RU_PER_SEC", default_value_t = 10_000.0)]
    ru_per_sec: f64,
    /// Latency added to every request, milliseconds.
    #[arg(long, env = "COSMOS_SIM_LATENCY_MS", default_value_t = 0)]
    latency_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        // Colour codes only for a person at a terminal, not in files or log collectors.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let mut builder = cosmos_sim::CosmosSim::builder()
        .addr(SocketAddr::new(args.bind, args.port))
        .partitions(args.partitions)
        .ru_per_sec(args.ru_per_sec)
        .latency(Duration::from_millis(args.latency_ms));
    if let Some(key) = args.key {
        builder = builder.key(key);
    }
    let sim = builder
        .start()
        .await
        .context("starting cosmos-sim (check --port, --key, --partitions, --ru-per-sec)")?;
    println!("cosmos-sim listening on {}", sim.endpoint());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    tracing::info!("shutting down");
    sim.shutdown().await;
    Ok(())
}

//! `cosmos-sim`: the local Cosmos DB endpoint as a standalone server.

use anyhow::Context as _;
use clap::Parser;
use cosmos_sim::{DataRole, EntraTrust};
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
    /// Entra ID issuer whose tokens are taken, exactly as tokens name it in `iss` (its OpenID
    /// discovery document is under it), e.g. `https://login.microsoftonline.com/{tenant}/v2.0`.
    #[arg(long, env = "COSMOS_SIM_ENTRA_ISSUER", requires = "entra_tenant")]
    entra_issuer: Option<String>,
    /// Tenant id tokens must carry (`tid`).
    #[arg(long, env = "COSMOS_SIM_ENTRA_TENANT", requires = "entra_issuer")]
    entra_tenant: Option<String>,
    /// Audiences taken besides https://cosmos.azure.com and the endpoint's own URL (e.g. the
    /// account URL https://{account}.documents.azure.com), comma-separated.
    #[arg(
        long,
        env = "COSMOS_SIM_ENTRA_AUDIENCES",
        value_delimiter = ',',
        requires = "entra_issuer"
    )]
    entra_audiences: Vec<String>,
    /// A CA certificate (PEM file) to trust for the issuer's HTTPS besides the system's roots.
    #[arg(long, env = "COSMOS_SIM_ENTRA_CA_FILE", requires = "entra_issuer")]
    entra_ca_file: Option<std::path::PathBuf>,
    /// Data-plane role assignments, `OBJECT_ID=reader|contributor` (or a role definition id),
    /// comma-separated.
    #[arg(long, env = "COSMOS_SIM_ROLE_ASSIGNMENTS", value_delimiter = ',', value_parser = assignment, requires = "entra_issuer")]
    role_assignments: Vec<(String, DataRole)>,
    /// Refuse requests signed with the key, as an account with `disableLocalAuth` does
    /// (needs --entra-issuer).
    #[arg(long, env = "COSMOS_SIM_DISABLE_LOCAL_AUTH", requires = "entra_issuer")]
    disable_local_auth: bool,
}

/// `OBJECT_ID=ROLE`.
fn assignment(s: &str) -> Result<(String, DataRole), String> {
    let (oid, role) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not OBJECT_ID=ROLE"))?;
    Ok((oid.trim().to_string(), role.trim().parse()?))
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
        .latency(Duration::from_millis(args.latency_ms))
        .local_auth(!args.disable_local_auth);
    if let Some(key) = args.key {
        builder = builder.key(key);
    }
    if let (Some(issuer), Some(tenant)) = (args.entra_issuer, args.entra_tenant) {
        let mut trust = EntraTrust::new(issuer, tenant);
        trust.audiences = args.entra_audiences;
        if let Some(path) = args.entra_ca_file {
            let pem = std::fs::read_to_string(&path)
                .with_context(|| format!("reading --entra-ca-file {}", path.display()))?;
            trust = trust.ca_pem(pem);
        }
        builder = builder.entra(trust);
    }
    for (oid, role) in args.role_assignments {
        builder = builder.role_assignment(oid, role);
    }
    let sim = builder.start().await.context(
        "starting cosmos-sim (check --port, --key, --partitions, --ru-per-sec, --entra-issuer)",
    )?;
    println!("cosmos-sim listening on {}", sim.endpoint());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    tracing::info!("shutting down");
    sim.shutdown().await;
    Ok(())
}

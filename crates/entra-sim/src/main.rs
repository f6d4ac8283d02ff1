//! `entra-sim`: the local Entra ID token issuer as a standalone server, configured by a JSON
//! or TOML file (the shape of `entra_sim::Config`). It prints its URLs (one JSON line on
//! standard output, for scripts) and serves until Ctrl-C.

use anyhow::Context as _;
use clap::Parser;
use entra_sim::{Config, EntraSim, Listen};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// A local Microsoft Entra ID token issuer: v2.0 discovery and keys, client credentials,
/// authorization code with PKCE, refresh tokens, an App Service managed identity endpoint.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// The directory: tenant, apps, users, managed identities (`.json` or `.toml`).
    #[arg(long, env = "ENTRA_SIM_CONFIG")]
    config: Option<PathBuf>,
    /// Where to listen (port 0: a free port).
    #[arg(long, env = "ENTRA_SIM_ADDR", default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Serve HTTPS with a CA made at start (MSAL and azure-identity need an https authority).
    #[arg(long, env = "ENTRA_SIM_HTTPS")]
    https: bool,
    /// Where to write the CA certificate (PEM) clients should trust, with --https.
    #[arg(long, env = "ENTRA_SIM_CA_OUT", requires = "https")]
    ca_out: Option<PathBuf>,
}

fn load(path: &Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config = if path.extension().is_some_and(|e| e == "toml") {
        toml::from_str(&text).with_context(|| format!("{} (TOML)", path.display()))?
    } else {
        serde_json::from_str(&text).with_context(|| format!("{} (JSON)", path.display()))?
    };
    Ok(config)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let config = match &cli.config {
        Some(path) => load(path)?,
        None => Config::default(),
    };
    let listen = Listen {
        addr: cli.addr,
        https: cli.https,
    };
    let sim = EntraSim::start(config, listen)
        .await
        .context("starting the issuer")?;
    if let (Some(path), Some(pem)) = (&cli.ca_out, sim.ca_pem()) {
        std::fs::write(path, pem).with_context(|| format!("writing {}", path.display()))?;
    }
    let urls = serde_json::json!({
        "authority": sim.authority(),
        "issuer": sim.issuer(),
        "openid_configuration": sim.discovery_url(),
        "token_endpoint": sim.token_endpoint(),
        "identity_endpoint": sim.identity_endpoint(),
        "identity_header": sim.identity_header(),
        "tenant_id": sim.tenant_id(),
    });
    println!("{urls}");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    sim.shutdown();
    Ok(())
}

//! `fleet-api`: serves the read API and the live map of the fleet from Cosmos DB.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use cosmos::CosmosClient;
use fleet_api::{Access, Role, key_line};
use fleet_api::{ApiConfig, Settings};
use rustls::ServerConfig;

/// Answers "which drones are within 1 km of here" and shows the fleet on a map.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// TOML file of settings (keys: the environment variable names in lower case).
    #[arg(long, env = "FLEET_API_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: Settings,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Reads an API key on standard input and prints its line for API_KEYS_FILE
    /// (`printf %s "$KEY" | fleet-api hash-key ci Fleet.Read >> keys`).
    HashKey {
        /// The key's name, one word (what the audit log shows).
        name: String,
        /// Fleet.Read or Fleet.Admin.
        role: Role,
    },
}

/// The key file's line for the key on standard input (one trailing line break dropped).
fn hash_key(name: &str, role: Role) -> anyhow::Result<()> {
    let mut key = String::new();
    std::io::stdin()
        .read_to_string(&mut key)
        .context("cannot read the key from standard input")?;
    let key = key
        .strip_suffix('\n')
        .map(|k| k.strip_suffix('\r').unwrap_or(k))
        .unwrap_or(&key);
    println!("{}", key_line(name, role, key)?);
    Ok(())
}

fn resolve(cli: &Cli) -> anyhow::Result<ApiConfig> {
    let secrets = Settings::secrets_from_env()?;
    Ok(settings::layer(cli.settings.clone(), secrets, cli.config.as_deref())?.resolve()?)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::HashKey { name, role }) = &cli.command {
        return settings::exit_code("fleet-api hash-key", hash_key(name, *role));
    }
    let config = match settings::configured("fleet-api", resolve(&cli)) {
        Ok(config) => config,
        Err(code) => return code,
    };
    config.log_format.init_logs();
    // Read at start, so that a wrong file stops the program with its name.
    let tls = config.tls.as_ref().map(fleet_api::server_config);
    let tls = match settings::configured("fleet-api", tls.transpose()) {
        Ok(tls) => tls,
        Err(code) => return code,
    };
    settings::exit_code("fleet-api", run(config, tls).await)
}

async fn run(config: ApiConfig, tls: Option<Arc<ServerConfig>>) -> anyhow::Result<()> {
    let client = CosmosClient::new(entra_credential::cosmos_config(&config.cosmos)?)?;
    let container = client.container(&config.cosmos.database, &config.cosmos.container);
    container.properties().await.with_context(|| {
        format!(
            "cannot read container {}/{} at {} (check COSMOS_ENDPOINT, COSMOS_DATABASE, COSMOS_CONTAINER; with COSMOS_AUTH=entra, that the API's identity has the role \"Cosmos DB Built-in Data Reader\" on the account)",
            config.cosmos.database, config.cosmos.container, config.cosmos.endpoint
        )
    })?;
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .with_context(|| format!("cannot listen on {} (API_ADDR)", config.addr))?;
    let addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%addr, scheme, "serving the API and the map");
    println!("fleet-api: listening on {scheme}://{addr}/");
    let stop = settings::stop_on_signal("stopping")?;
    let access = Access::start(config.access)
        .await
        .context("cannot read the OIDC issuer's keys (check API_OIDC_ISSUER)")?;
    let router = fleet_api::router(container, config.options, access);
    match tls {
        Some(tls) => fleet_api::serve_tls(listener, router, tls, config.serving, stop).await?,
        None => fleet_api::serve_within(listener, router, config.serving, None, stop).await?,
    }
    Ok(())
}

//! `alerter`: alerts from the positions' change feed, delivered as CloudEvents.

use std::path::PathBuf;
use std::process::ExitCode;

use alerter::{AlerterConfig, Settings};
use clap::Parser;

/// Tells someone when a drone crosses a fence, goes silent or runs low, with no map open.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// TOML file of settings (keys: the environment variable names in lower case).
    #[arg(long, env = "ALERTER_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: Settings,
}

fn resolve(cli: &Cli) -> anyhow::Result<AlerterConfig> {
    let secrets = Settings::secrets_from_env()?;
    Ok(settings::layer(cli.settings.clone(), secrets, cli.config.as_deref())?.resolve()?)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match settings::configured("alerter", resolve(&cli)) {
        Ok(config) => config,
        Err(code) => return code,
    };
    config.log_format.init_logs();
    let stop = match settings::stop_on_signal("releasing the leases and stopping") {
        Ok(stop) => stop,
        Err(e) => return settings::exit_code("alerter", Err(e)),
    };
    settings::exit_code("alerter", alerter::run(config, stop).await)
}

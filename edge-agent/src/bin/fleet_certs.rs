//! `fleet-certs`: issues each drone of a list its own key and certificate from the fleet's
//! intermediate CA, where the images are personalised (never on a drone: it needs the CA's
//! key). The drone's image gets `{id}.pem` as `DPS_CERT_FILE` and `{id}-key.pem` as
//! `DPS_KEY_FILE`; DPS trusts them through an X.509 enrollment group of the fleet's CA.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use edge_agent::FleetCa;

/// Issue per-drone certificates (common name = registration id) from the fleet's
/// intermediate CA, for X.509 attestation with DPS.
#[derive(Parser)]
#[command(name = "fleet-certs", version)]
struct Cli {
    /// The CA's certificate (PEM): the fleet's intermediate, then its issuers up to but
    /// not including the root. It follows each leaf in the drone's chain.
    #[arg(long)]
    ca_cert: PathBuf,
    /// The CA's private key (PEM).
    #[arg(long)]
    ca_key: PathBuf,
    /// Where to write `{id}.pem` and `{id}-key.pem` (existing files are never replaced).
    #[arg(long)]
    out: PathBuf,
    /// Days each certificate is valid from today.
    #[arg(long, default_value_t = 3650)]
    days: u32,
    /// A file of registration ids, one a line; without it, standard input.
    ids: Option<PathBuf>,
}

fn main() -> ExitCode {
    match issue(&Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("fleet-certs: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn issue(cli: &Cli) -> anyhow::Result<()> {
    let ca = FleetCa::load(&cli.ca_cert, &cli.ca_key)?;
    let ids: Vec<String> = match &cli.ids {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("read {}", path.display()))?
            .lines()
            .map(str::to_owned)
            .collect(),
        None => std::io::stdin()
            .lock()
            .lines()
            .collect::<Result<_, _>>()
            .context("read the registration ids from standard input")?,
    };
    std::fs::create_dir_all(&cli.out).with_context(|| format!("create {}", cli.out.display()))?;
    for id in ids.iter().map(|id| id.trim()).filter(|id| !id.is_empty()) {
        let (chain, key) = ca.issue(id, cli.days)?.write(&cli.out, id)?;
        println!("{id}\t{}\t{}", chain.display(), key.display());
    }
    Ok(())
}

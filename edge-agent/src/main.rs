//! The `edge-agent` binary: `run` (the default) runs the agent until SIGTERM or SIGINT;
//! `sas-token` prints a SAS token; `provision` registers with DPS and `derive-key` derives
//! a drone's DPS key; `check` validates the configuration and the connection and prints a
//! report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::{CommandFactory as _, Parser, Subcommand};
use edge_agent::ConnectionEnd;
use edge_agent::Dialer;
use edge_agent::DiskBuffer;
use edge_agent::FixTime;
use edge_agent::SourceConfig;
use edge_agent::{Agent, AgentConfig, Auth, CancellationToken, Endpoint};
use edge_agent::{
    CONNECTION_STRING, DPS_DEVICE_KEY, DPS_GROUP_KEY, DurationSetting, MQTT_PASSWORD, Secret,
    Settings,
};
use edge_agent::{Clock, kernel_synchronised};
use edge_agent::{DeviceConnectionString, resource_uri, sas_token};
use settings::LogFormat;

/// Drone edge agent: publishes the drone's position to Azure IoT Hub (or an MQTT broker)
/// every interval, with store-and-forward on disk.
#[derive(Parser)]
#[command(name = "edge-agent", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// TOML config file (keys: the settings below in snake case).
    #[arg(long, env = "EDGE_AGENT_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "LOG_JSON", global = true)]
    log_json: bool,
    #[command(flatten)]
    settings: Settings,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent (the default).
    Run,
    /// Print a SAS token for the device connection string in
    /// IOTHUB_DEVICE_CONNECTION_STRING, or in the file IOTHUB_DEVICE_CONNECTION_STRING_FILE
    /// names (`-`: standard input). A secret is never a flag.
    SasToken {
        /// Lifetime from now (`3600`, `1h`; default 1h).
        #[arg(long, conflicts_with = "expiry")]
        ttl: Option<DurationSetting>,
        /// Expiry as Unix seconds.
        #[arg(long)]
        expiry: Option<u64>,
    },
    /// Register with the Device Provisioning Service now (DPS_ID_SCOPE and a key), keep
    /// the assignment beside the buffer and print it.
    Provision,
    /// Print the DPS key of the drone with this registration id (its DPS_DEVICE_KEY),
    /// derived from its enrollment group's key: DPS_GROUP_KEY, the file DPS_GROUP_KEY_FILE
    /// names, or else standard input (what `az iot dps enrollment-group compute-device-key`
    /// prints). Run it where the image is personalised, not on the drone.
    DeriveKey {
        /// The drone's registration id.
        #[arg(long)]
        registration_id: String,
    },
    /// Check the configuration, the buffer, the source and the connection, and print a
    /// report (exit status 1 if anything failed).
    Check {
        /// How long to wait for a fix and for the connection (`10`, `10s`, `1m`).
        #[arg(long, default_value = "10s")]
        timeout: DurationSetting,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.log_json {
        LogFormat::Json
    } else {
        LogFormat::Text
    }
    .init_logs();
    let outcome = match cli.command {
        Some(Command::SasToken { ttl, expiry }) => print_sas_token(ttl, expiry),
        Some(Command::DeriveKey { registration_id }) => print_derived_key(&registration_id),
        Some(Command::Provision) => {
            layered(&cli).and_then(|(settings, _)| runtime()?.block_on(provision_now(settings)))
        }
        Some(Command::Check { timeout }) => runtime().and_then(|rt| {
            rt.block_on(async {
                let config = config(&cli).await?;
                check(config, timeout).await
            })
        }),
        Some(Command::Run) | None => runtime().and_then(|rt| rt.block_on(run(&cli))),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("edge-agent: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// One thread is plenty for one drone, and the smallest footprint.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")
}

/// The settings from flags, environment and config file, as given, and the agent's
/// environment variable names.
fn layered(cli: &Cli) -> anyhow::Result<(Settings, settings::EnvNames)> {
    // Secrets come from the environment or the file, never from the command line.
    let secrets = Settings {
        connection_string: connection_string()?,
        dps_group_key: settings::secret_from_env(DPS_GROUP_KEY)?,
        dps_device_key: settings::secret_from_env(DPS_DEVICE_KEY)?,
        mqtt_password: settings::secret_from_env(MQTT_PASSWORD)?,
        ..Settings::default()
    };
    let names = edge_agent::env_names(&Cli::command());
    let settings = settings::layer(cli.settings.clone(), secrets, cli.config.as_deref())?;
    Ok((settings, names))
}

/// The settings checked, with the environment's variables with the agent's prefixes too;
/// a drone onboarded through DPS first gets its assignment (kept, or registered now).
async fn config(cli: &Cli) -> anyhow::Result<AgentConfig> {
    const FIX: &str = "configuration error (fix the setting named and start again)";
    let (settings, names) = layered(cli)?;
    let onboarded = settings.dps_id_scope.is_some();
    let settings = match settings.dps().context(FIX)? {
        Some(dps) => {
            let dir = buffer_dir(&settings)?;
            let assignment =
                edge_agent::dps_assignment(&dps, &dir, registration_backoff(&settings)).await?;
            settings.provisioned(&assignment, &dps.attestation()?)
        }
        None => settings,
    };
    let mut config = settings
        .resolve_in(&names, &settings::env_var_names())
        .context(FIX)?;
    if onboarded {
        config.transport.refusals_before_giving_up = Some(REFUSALS_BEFORE_REGISTERING_AGAIN);
    }
    Ok(config)
}

/// Refusals of the credentials in a row after which a drone onboarded through DPS registers
/// again: IoT Hub refuses a device it deleted or disabled on every attempt, so three tell it
/// from a refusal in passing.
const REFUSALS_BEFORE_REGISTERING_AGAIN: u32 = 3;

/// Where a DPS assignment is kept: the buffer's directory.
fn buffer_dir(settings: &Settings) -> anyhow::Result<PathBuf> {
    settings.buffer_dir.clone().context(
        "configuration error: BUFFER_DIR is required (the buffer and the DPS assignment are kept there)",
    )
}

/// Registrations are tried again on the reconnect schedule.
fn registration_backoff(settings: &Settings) -> retry_backoff::BackoffConfig {
    retry_backoff::BackoffConfig {
        base: settings
            .reconnect_base
            .map_or(Duration::from_secs(1), DurationSetting::get),
        cap: settings
            .reconnect_cap
            .map_or(Duration::from_secs(60), DurationSetting::get),
    }
}

/// `edge-agent provision`: registers now (also when an assignment is kept) and prints it.
async fn provision_now(settings: Settings) -> anyhow::Result<ExitCode> {
    let Some(dps) = settings
        .dps()
        .context("configuration error (fix the setting named and start again)")?
    else {
        bail!("set DPS_ID_SCOPE and DPS_GROUP_KEY (or DPS_DEVICE_KEY) to register with DPS");
    };
    let dir = buffer_dir(&settings)?;
    let attestation = dps.attestation()?;
    let assignment = edge_agent::register(&dps, &attestation)
        .await
        .context("DPS registration failed")?;
    edge_agent::save_assignment(&dir, &assignment)?;
    println!("{}", serde_json::to_string_pretty(&assignment)?);
    Ok(ExitCode::SUCCESS)
}

/// `edge-agent derive-key`: the drone's key from the group key in DPS_GROUP_KEY, its file,
/// or standard input.
fn print_derived_key(registration_id: &str) -> anyhow::Result<ExitCode> {
    let group_key = match settings::secret_from_env(DPS_GROUP_KEY)? {
        Some(key) => key,
        None => {
            let mut key = String::new();
            std::io::stdin()
                .read_line(&mut key)
                .context("read the group key from standard input")?;
            if key.trim().is_empty() {
                bail!(
                    "give the enrollment group's key on standard input, in DPS_GROUP_KEY or in the file DPS_GROUP_KEY_FILE names"
                );
            }
            Secret::new(key)
        }
    };
    println!(
        "{}",
        edge_agent::derive_device_key(group_key.expose(), registration_id)?
    );
    Ok(ExitCode::SUCCESS)
}

/// The device connection string from the environment or its file, if set.
fn connection_string() -> anyhow::Result<Option<Secret>> {
    Ok(settings::secret_from_env(CONNECTION_STRING)?)
}

fn print_sas_token(ttl: Option<DurationSetting>, expiry: Option<u64>) -> anyhow::Result<ExitCode> {
    let Some(connection_string) = connection_string()? else {
        bail!(
            "set IOTHUB_DEVICE_CONNECTION_STRING, or IOTHUB_DEVICE_CONNECTION_STRING_FILE to a file holding it (- for standard input)"
        );
    };
    let cs = DeviceConnectionString::parse(connection_string.expose())?;
    let Some(key) = cs.key else {
        bail!("the connection string has no SharedAccessKey");
    };
    let expiry = match expiry {
        Some(expiry) => expiry,
        None => {
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
            now + ttl.map_or(3600, |ttl| ttl.get().as_secs())
        }
    };
    println!(
        "{}",
        sas_token(&resource_uri(&cs.host, &cs.device_id), key.expose(), expiry)
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs the agent until SIGTERM or SIGINT. A drone onboarded through DPS whose hub refuses
/// its credentials (deleted, disabled, moved) forgets its assignment and registers again;
/// its buffer keeps every position meanwhile.
async fn run(cli: &Cli) -> anyhow::Result<ExitCode> {
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    loop {
        let config = tokio::select! {
            config = config(cli) => config?,
            () = shutdown.cancelled() => return Ok(ExitCode::SUCCESS),
        };
        let buffer_dir = config.buffer.dir.clone();
        let agent = Agent::new(config).context("the agent cannot start")?;
        let report = agent.run(shutdown.clone()).await?;
        tracing::info!(status = ?report.status, "stopped");
        match report.ended {
            ConnectionEnd::Stopped => return Ok(ExitCode::SUCCESS),
            ConnectionEnd::CredentialsRefused => {
                edge_agent::forget_assignment(&buffer_dir)?;
                tracing::warn!(
                    "the assigned hub refuses the credentials: registering with DPS again"
                );
            }
        }
    }
}

/// Cancels `shutdown` on SIGTERM (systemd stop) or SIGINT (Ctrl-C).
async fn stop_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for signals; stop the agent with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::info!("stopping");
    shutdown.cancel();
}

/// One line of the check report.
fn line(ok: bool, what: &str, detail: impl std::fmt::Display) -> bool {
    println!("[{}] {what}: {detail}", if ok { " ok " } else { "FAIL" });
    ok
}

async fn check(config: AgentConfig, timeout: DurationSetting) -> anyhow::Result<ExitCode> {
    let timeout = timeout.get();
    let mut ok = line(true, "configuration", describe(&config));
    ok &= match DiskBuffer::open(&config.buffer) {
        Ok(buffer) => {
            let stats = buffer.stats();
            line(
                stats.corrupt == 0,
                "buffer",
                format!(
                    "{}: {} messages waiting, {} bytes of {}, {} corrupt records, next seq {}",
                    config.buffer.dir.display(),
                    stats.depth,
                    stats.bytes,
                    config.buffer.max_bytes,
                    stats.corrupt,
                    buffer.next_id()
                ),
            )
        }
        Err(err) => line(false, "buffer", err),
    };
    let clock = Clock::new(config.clock_max_skew);
    ok &= check_source(&config, &clock, timeout).await;
    ok &= match Dialer::new(
        config.transport.clone(),
        config.device_id.clone(),
        clock.clone(),
    ) {
        Ok(dialer) => match tokio::time::timeout(timeout, dialer.check()).await {
            Ok(Ok(())) => line(true, "connection", "connected and acknowledged (CONNACK)"),
            Ok(Err(err)) => line(false, "connection", err),
            Err(_) => line(
                false,
                "connection",
                format!("no CONNACK within {timeout:?}"),
            ),
        },
        Err(err) => line(false, "connection", err),
    };
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Waits for a first fix from the source and tells which clock stamps it.
async fn check_source(config: &AgentConfig, clock: &Clock, timeout: Duration) -> bool {
    let source = edge_agent::Source::probe(&config.source, clock);
    let Ok(fix) = tokio::time::timeout(timeout, source.first_fix()).await else {
        let heard = match source.mavlink_status() {
            Some(m) if m.vehicle.is_none() => format!(
                "; no autopilot HEARTBEAT heard ({} messages of other systems, {} unreadable{})",
                m.ignored_other_systems,
                m.unreadable,
                refused_frames(&m)
            ),
            _ => String::new(),
        };
        return line(false, "source", format!("no fix within {timeout:?}{heard}"));
    };
    let mut ok = line(
        true,
        "source",
        format!("fix at {:.6}, {:.6}", fix.lat, fix.lon),
    );
    if let Some(m) = source.mavlink_status() {
        let vehicle = match (m.vehicle, m.version) {
            (Some(v), Some(version)) => format!(
                "system {} component {} ({version})",
                v.system_id, v.component_id
            ),
            (Some(v), None) => format!("system {} component {}", v.system_id, v.component_id),
            (None, _) => "none chosen".to_owned(),
        };
        line(
            true,
            "mavlink",
            format!(
                "vehicle {vehicle}, {} messages of other systems ignored, {} unreadable{}, {} heartbeats sent",
                m.ignored_other_systems,
                m.unreadable,
                refused_frames(&m),
                m.heartbeats_sent
            ),
        );
    }
    let synchronised = kernel_synchronised();
    let board = if synchronised {
        "the board clock is synchronised"
    } else {
        "the kernel reports the board clock unsynchronised"
    };
    let offset = clock
        .offset()
        .map_or("no GPS time seen yet".to_owned(), |o| {
            format!("board clock {} ms off GPS time", -o.num_milliseconds())
        });
    ok &= match fix.time {
        FixTime::Gps(gps) => line(true, "clock", format!("GPS time {gps}; {offset}; {board}")),
        FixTime::Board(at) => match clock.stamp_board(at, synchronised) {
            Some((ts, by)) => line(true, "clock", format!("{ts} by {by:?}; {offset}; {board}")),
            None => line(
                false,
                "clock",
                format!(
                    "the board clock reads {at}, before any plausible date, and the source gives no GPS time: positions wait (no_time)"
                ),
            ),
        },
    };
    ok
}

/// The frames refused for their signature, when the link has a signing key.
fn refused_frames(m: &edge_agent::MavlinkStatus) -> String {
    m.refused.map_or_else(String::new, |r| {
        format!(
            ", refused: {} unsigned, {} not signed with the key, {} with an old timestamp",
            r.unsigned, r.bad_signature, r.old_timestamp
        )
    })
}

fn describe(config: &AgentConfig) -> String {
    let source = match &config.source {
        SourceConfig::Mavlink(mavlink) => match mavlink.system_id {
            Some(id) => format!("mavlink {}, vehicle {id}", mavlink.address),
            None => format!("mavlink {}, the first autopilot heard", mavlink.address),
        },
        SourceConfig::Gpsd { address } => format!("gpsd {address}"),
        SourceConfig::Sim(sim) => format!(
            "sim seed {} around {}, {}",
            sim.seed, sim.home_lat, sim.home_lon
        ),
    };
    let endpoint = match &config.transport.endpoint {
        Endpoint::Tcp { host, port } => format!("mqtt://{host}:{port}"),
        Endpoint::Tls { host, port } => format!("mqtts://{host}:{port}"),
        Endpoint::WebSocket { url } => url.clone(),
    };
    let auth = match &config.transport.auth {
        Auth::Broker(broker) => match (&broker.login, &broker.identity) {
            (Some(login), Some(identity)) => format!(
                "user {}, certificate {}",
                login.username,
                identity.cert_path.display()
            ),
            (Some(login), None) => format!("user {}", login.username),
            (None, Some(identity)) => format!("certificate {}", identity.cert_path.display()),
            (None, None) => "anonymous".to_owned(),
        },
        Auth::Sas(sas) => format!(
            "SAS, {} s tokens renewed at {:.0}%",
            sas.token_ttl.as_secs(),
            sas.renew_fraction * 100.0
        ),
        Auth::X509(x509) => format!("X.509 {}", x509.cert_path.display()),
    };
    format!(
        "device {}, source {source}, every {:?}, {endpoint} ({auth})",
        config.device_id, config.report_interval
    )
}

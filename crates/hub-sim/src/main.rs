//! `hub-sim`: the local IoT Hub (with its provisioning service) as a standalone server,
//! `hub-sim device add` to register devices and `hub-sim enrollment add` to enroll them for
//! provisioning, in its state directory (also while it runs). Its settings are in
//! `config/`.

mod config;

use anyhow::Context as _;
use clap::Parser as _;
use config::{Cli, Command, DeviceCommand, EnrollmentCommand};
use hub_sim::{EnrollmentId, Enrollments, HubSim, Registry, device_connection_string, ensure_dir};
use std::path::Path;

/// The host a running (or earlier) hub wrote into its service connection string.
fn host_of(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join("service-connection-string");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{}: start the hub once with this --state-dir",
            path.display()
        )
    })?;
    azure_text::connection_string::value_ignore_case(&text, "HostName")
        .map(str::to_owned)
        .with_context(|| format!("{} has no HostName", path.display()))
}

fn device_add(state_dir: &Path, id: &str, thumbprint: Option<&str>) -> anyhow::Result<()> {
    let registry = Registry::open(&state_dir.join("registry.json"))?;
    match thumbprint {
        Some(thumbprint) => {
            registry.add_x509(id, thumbprint)?;
            println!("registered X.509 device {id}");
        }
        None => {
            let key = registry.add_sas(id)?;
            let host = host_of(state_dir)?;
            println!("{}", device_connection_string(&host, id, &key));
        }
    }
    Ok(())
}

fn enrollment_add(
    state_dir: &Path,
    group: &str,
    x509_ca: Option<&Path>,
    disabled: bool,
) -> anyhow::Result<()> {
    ensure_dir(state_dir)?;
    let enrollments = Enrollments::open(&state_dir.join("enrollments.json"))?;
    match x509_ca {
        Some(path) => {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("{}: the group's CA certificate", path.display()))?;
            enrollments.add_x509_group(group, &pem)?;
            eprintln!("enrolled X.509 group {group}");
        }
        None => println!("{}", enrollments.add_symmetric_key_group(group)?),
    }
    if disabled {
        enrollments.set_enabled(&EnrollmentId::Group(group.to_owned()), false)?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Device(DeviceCommand::Add {
            state_dir,
            x509_thumbprint,
            id,
        })) => return device_add(&state_dir, &id, x509_thumbprint.as_deref()),
        Some(Command::Enrollment(EnrollmentCommand::Add {
            state_dir,
            group,
            x509_ca,
            disabled,
        })) => return enrollment_add(&state_dir, &group, x509_ca.as_deref(), disabled),
        None => {}
    }
    let config = cli.run.hub_config()?;
    let state_dir = config.state_dir.clone();
    let hub = HubSim::start(config)
        .await
        .context("hub-sim did not start")?;
    println!(
        "hub-sim: MQTT/TLS {} WebSockets {} AMQP {} state {}",
        hub.mqtt_addr(),
        hub.ws_addr(),
        hub.amqp_addr(),
        state_dir.display()
    );
    println!(
        "hub-sim: provisioning {} ID scope {}",
        hub.dps_addr(),
        hub.id_scope()
    );
    if let Some(tls) = hub.amqp_tls_addr() {
        println!("hub-sim: AMQP/TLS {tls}");
    }
    if let Some(admin) = hub.admin_addr() {
        println!("hub-sim: admin http://{admin}/metrics");
    }
    tokio::signal::ctrl_c().await?;
    hub.shutdown().await;
    Ok(())
}

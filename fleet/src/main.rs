//! `fleet`: the demo (`fleet demo`), the load generator (`fleet loadgen`) and the capacity
//! planner (`fleet plan`). Its settings are in `config/`.

mod config;

use anyhow::Context as _;
use clap::Parser as _;
use config::{Cli, Command, Demo, Loadgen, LoadgenArgs, Plan};
use tokio_util::sync::CancellationToken;

use fleet::{Broker, BrokerKind, HubKind, Target};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        // Colour codes only for a person at a terminal, not in files or log collectors.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // The Event Hubs SDK warns of every receiver link an owner level takes
                // over, which is how the replicas hand partitions over: errors only.
                .unwrap_or_else(|_| "warn,rumqttd=off,azure_messaging_eventhubs=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nstopping (Ctrl-C again to abort)...");
                shutdown.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        }
    });
    match cli.command {
        Command::Demo(args) => run_demo(args.demo()?, shutdown).await,
        Command::Loadgen(args) => run_loadgen(args, shutdown).await,
        Command::Plan(args) => run_plan(args.plan()?),
    }
}

fn run_plan(plan: Plan) -> anyhow::Result<()> {
    let planned = fleet::plan(&plan.fleet, &plan.prices, &plan.limits);
    if plan.json {
        println!("{}", serde_json::to_string_pretty(&planned)?);
    } else {
        print!(
            "{}",
            fleet::plan_text(&plan.fleet, &planned, &plan.prices, &plan.limits)
        );
    }
    Ok(())
}

async fn run_demo(demo: Demo, shutdown: CancellationToken) -> anyhow::Result<()> {
    raise_open_file_limit();
    let config = demo.config;
    println!(
        "demo: scenario {} - {}\n{} drones at {}x for {:?} ({}), {} partitions, {} RU/s, {} ms per request; Ctrl-C stops",
        config.label(),
        config.claim(),
        config.drones,
        config.speedup,
        config.duration,
        match config.hub {
            HubKind::Iothub => "local IoT Hub, two writer replicas".to_owned(),
            HubKind::Mqtt => format!("{} MQTT broker, one writer", config.broker.name()),
        },
        config.partitions,
        config.ru_per_sec,
        config.latency.as_millis()
    );
    let report = fleet::run_demo(config, shutdown).await?;
    print!("{}", report.render());
    if let Some(path) = demo.report_json {
        std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(())
}

/// A thousand drones hold two thousand sockets in this process: lift the soft limit on
/// open files to the hard limit.
fn raise_open_file_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

async fn run_loadgen(args: LoadgenArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    // An embedded broker lives as long as the run.
    let (target, _broker) = match args.target()? {
        Some(target) => (target, None),
        None => {
            let broker = tokio::task::spawn_blocking(|| Broker::start(BrokerKind::Embedded))
                .await?
                .context("starting the embedded broker")?;
            let addr = broker.addr();
            let target = Target::Mqtt {
                host: addr.ip().to_string(),
                port: addr.port(),
            };
            (target, Some(broker))
        }
    };
    let Loadgen {
        config,
        report_json,
    } = args.loadgen(target);
    let destination = match &config.target {
        Target::Mqtt { host, port } => format!("mqtt://{host}:{port}"),
        Target::IotHub {
            connection_strings, ..
        } => format!(
            "IoT Hub ({} device connection strings)",
            connection_strings.len()
        ),
        Target::Dps {
            id_scope, endpoint, ..
        } => format!("IoT Hub through DPS at {endpoint} (ID scope {id_scope})"),
    };
    eprintln!(
        "loadgen: {} drones, {} msg/s, to {destination}, for at most {:?}{}",
        config.drones,
        config.rate,
        config.duration,
        config
            .count
            .map_or(String::new(), |c| format!(" or {c} messages"))
    );
    let report = fleet::run_loadgen(config, shutdown).await?;
    for line in report.lines() {
        println!("{line}");
    }
    if let Some(path) = report_json {
        std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

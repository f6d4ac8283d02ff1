//! `cloud-writer`: runs the writer (`run`, the default), backfills from a file
//! (`import FILE.jsonl`), checks the configuration and the container (`check`), or shows
//! and copies the Event Hubs checkpoints (`checkpoints show|copy`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use azure_messaging_eventhubs::CheckpointStore;
use clap::{Parser, Subcommand};
use cloud_writer::internals::{
    BlobCheckpointStore, CheckpointStoreKind, CosmosCheckpointStore, FileSource, Scope, SourceSpec,
    transfer,
};
use cloud_writer::internals::{cosmos_client, open_container, patch_in_batches, policy_cost};
use cloud_writer::{Counts, DropReason, Writer};
use cloud_writer::{DurationSetting, Settings, WriterConfig};
use indicatif::{ProgressBar, ProgressStyle};
use telemetry::DocumentLayout;

/// Writes drone positions from IoT Hub (Event Hubs) or MQTT into Cosmos DB.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// TOML file of settings (keys: the environment variable names in lower case).
    #[arg(long, env = "WRITER_CONFIG", global = true)]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: Settings,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume the source and write (the default).
    Run,
    /// Bulk-load wire messages or documents from a JSONL file (backfill).
    Import {
        /// The file, one JSON object per line.
        file: PathBuf,
        /// Drop positions older than this, e.g. 7d (default: keep all; backfills are old).
        #[arg(long)]
        stale_after: Option<DurationSetting>,
    },
    /// Check the configuration and the container, then exit.
    Check,
    /// The Event Hubs source's checkpoints: see them, or copy them between the stores.
    Checkpoints {
        #[command(subcommand)]
        action: CheckpointsAction,
    },
}

#[derive(Debug, Subcommand)]
enum CheckpointsAction {
    /// Print each partition's checkpoint and owner.
    Show {
        /// The store [default: the one the writer runs with].
        #[arg(long, value_enum)]
        store: Option<CheckpointStoreKind>,
    },
    /// Copy every partition's checkpoint from one store to the other (the Cosmos
    /// container EVENTHUBS_CHECKPOINT_CONTAINER, the blob container of CHECKPOINT_BLOB_*);
    /// ownerships are not copied: the writers claim the partitions afresh.
    Copy {
        /// The store to read.
        #[arg(long, value_enum)]
        from: CheckpointStoreKind,
        /// The store to write.
        #[arg(long, value_enum)]
        to: CheckpointStoreKind,
    },
}

fn resolve(cli: &Cli) -> anyhow::Result<WriterConfig> {
    cli.settings.refuse_secret_flags()?;
    let secrets = Settings::secrets_from_env()?;
    Ok(settings::layer(cli.settings.clone(), secrets, cli.config.as_deref())?.resolve()?)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match settings::configured("cloud-writer", resolve(&cli)) {
        Ok(config) => config,
        Err(code) => return code,
    };
    config.log_format.init_logs();
    let result = match cli.command {
        None | Some(Command::Run) => run(config).await,
        Some(Command::Import { file, stale_after }) => import(config, file, stale_after).await,
        Some(Command::Check) => check(config).await,
        Some(Command::Checkpoints { action }) => checkpoints(config, action).await,
    };
    settings::exit_code("cloud-writer", result)
}

async fn run(config: WriterConfig) -> anyhow::Result<()> {
    let writer = Writer::start(config).await.context("cannot start")?;
    let stop = writer.shutdown_token();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received: stopping");
        stop.cancel();
    });
    let counts = writer.wait().await?;
    tracing::info!(
        received = counts.received,
        written = counts.written,
        "stopped"
    );
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn import(
    mut config: WriterConfig,
    file: PathBuf,
    stale_after: Option<DurationSetting>,
) -> anyhow::Result<()> {
    config.staleness.stale_after = match stale_after {
        Some(after) => after.get(),
        // About a century: a backfill keeps everything.
        None => std::time::Duration::from_secs(100 * 365 * 24 * 3600),
    };
    config.metrics_addr = None;
    config.probe_addr = None;
    let size = std::fs::metadata(&file)
        .with_context(|| format!("cannot read {}", file.display()))?
        .len();
    let progress = ProgressBar::new(size).with_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("the progress template is valid"),
    );
    let bar = progress.clone();
    let writer = Writer::start_with(config, move |metrics| {
        Ok(Box::new(FileSource::new(file, metrics, move |n| {
            bar.inc(n)
        })))
    })
    .await
    .context("cannot start")?;
    let counts = writer.wait().await?;
    progress.finish();
    let missing = print_report(&counts);
    if missing > 0 {
        anyhow::bail!(
            "{missing} lines (or history documents) were not written; the report above says why"
        );
    }
    Ok(())
}

/// Prints the import's report; returns how many lines (or history documents) were not
/// written.
fn print_report(counts: &Counts) -> u64 {
    println!("lines read:          {}", counts.received);
    println!("documents written:   {}", counts.written);
    if counts.history_written > 0 {
        println!("history written:     {}", counts.history_written);
    }
    let superseded = counts.dropped(DropReason::Superseded);
    if superseded > 0 {
        let because = why(DropReason::Superseded);
        println!("superseded:          {superseded} ({because})");
    }
    let missing = not_written(counts);
    let total = missing.iter().map(|(_, n)| n).sum::<u64>() + counts.history_dropped;
    if total > 0 {
        println!("not written:         {total}");
        for (reason, n) in missing {
            println!("  {:<18} {n} ({})", format!("{reason}:"), why(reason));
            if reason == DropReason::Invalid {
                for (invalid, n) in &counts.invalid {
                    println!("    {:<16} {n}", format!("{invalid}:"));
                }
            }
        }
        if counts.history_dropped > 0 {
            let because = "history documents refused or stale while retried";
            println!(
                "  {:<18} {} ({because})",
                "history:", counts.history_dropped
            );
        }
    }
    total
}

/// Why lines dropped for `reason` were not written, for the import's report.
fn why(reason: DropReason) -> &'static str {
    match reason {
        DropReason::Stale => "older than --stale-after",
        DropReason::StaleInRetry => {
            "turned older than --stale-after while its write was retried or held"
        }
        DropReason::Invalid => "not a valid position (the log and DEAD_LETTER_FILE say why)",
        DropReason::Spoofed => "the payload's deviceId differs from the line's identity",
        DropReason::FromFuture => "device time further ahead than FUTURE_TOLERANCE",
        DropReason::Unroutable => "no device identity",
        DropReason::Superseded => "a newer position of the drone is stored",
        DropReason::WriteFailed => "Cosmos DB kept answering conflicts past the round limit",
        DropReason::DocumentTooLarge => {
            "Cosmos DB refused the document as too large (dead-lettered)"
        }
        DropReason::DocumentMalformed => "Cosmos DB could not read the document (dead-lettered)",
        DropReason::DocumentRefused => "Cosmos DB refused the document (dead-lettered)",
        DropReason::UnsupportedEvent | DropReason::InvalidEvent => {
            "not a position: an IoT Hub event (dead-lettered)"
        }
    }
}

/// The lines not written, by reason (with [`why`]). Superseded lines are not listed: a
/// newer position of their drone is stored. (History documents not written are
/// `counts.history_dropped`.)
fn not_written(counts: &Counts) -> Vec<(DropReason, u64)> {
    DropReason::ALL
        .into_iter()
        .filter(|r| *r != DropReason::Superseded)
        .map(|r| (r, counts.dropped(r)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Says what the container's indexing policy makes each position cost, and warns when it
/// indexes more than the read side needs or leaves out what it needs.
async fn report_indexing(
    container: &cosmos::ContainerClient,
    layout: &DocumentLayout,
    (database, name): (&str, &str),
) -> anyhow::Result<()> {
    let properties = container
        .properties()
        .await
        .context("reading the container's indexing policy")?;
    let Some(policy) = properties.indexing_policy else {
        println!("note: the container's properties name no indexing policy");
        return Ok(());
    };
    let cost = match policy_cost(&policy, layout) {
        Ok(cost) => cost,
        Err(e) => {
            println!("warning: the container's indexing policy could not be read: {e}");
            return Ok(());
        }
    };
    let ours = policy_cost(&telemetry::indexing_policy(), layout)
        .map_err(|e| anyhow::anyhow!("deploy/cosmos/indexing-policy.json: {e}"))?;
    if !cost.missing.is_empty() {
        println!(
            "warning: the container's indexing policy leaves out paths fleet-api filters, orders or searches on: {} (deploy/cosmos/indexing-policy.json indexes them)",
            cost.missing.join(", ")
        );
    }
    if cost.ru_per_position > ours.ru_per_position + 0.05 {
        println!(
            "warning: the container's indexing policy indexes more than the read side needs: about {:.1} RU per position written, against {:.1} RU under deploy/cosmos/indexing-policy.json ({:.0} % less); apply it with: az cosmosdb sql container update --account-name ACCOUNT --resource-group GROUP --database-name {} --name {} --idx @deploy/cosmos/indexing-policy.json",
            cost.ru_per_position,
            ours.ru_per_position,
            100.0 * (1.0 - ours.ru_per_position / cost.ru_per_position),
            database,
            name,
        );
    } else {
        println!(
            "ok: the indexing policy costs about {:.1} RU per position written",
            cost.ru_per_position
        );
    }
    Ok(())
}

/// Says which history format the container holds: one document per position (`kind`
/// `history`), track segments (`kind` `segment`), both or none. Two `TOP 1` queries on the
/// indexed `kind`, about 3 RU each per physical partition.
async fn report_history(container: &cosmos::ContainerClient) -> anyhow::Result<()> {
    let mut held = [false; 2];
    for (kind, found) in ["history", "segment"].into_iter().zip(held.iter_mut()) {
        let query = cosmos::QueryRequest {
            query: format!("SELECT TOP 1 c.id FROM c WHERE c.kind = '{kind}'"),
            parameters: vec![],
        };
        let response = container
            .query(&query, cosmos::QueryScope::AllRanges)
            .await
            .with_context(|| format!("looking for documents of kind {kind}"))?;
        *found = !response.documents.is_empty();
    }
    let format = match held {
        [false, false] => "none",
        [true, false] => "one document per position",
        [false, true] => "track segments",
        [true, true] => "both one document per position and track segments",
    };
    println!("history: {format}");
    Ok(())
}

async fn check(config: WriterConfig) -> anyhow::Result<()> {
    let layout = DocumentLayout::new(config.cosmos.partition_key_path.clone());
    let client = cosmos_client(&config.cosmos)?;
    let opened = open_container(&client, &config.cosmos, &layout, None).await?;
    if opened.missing_partition_key {
        println!(
            "forced: container '{}' of database '{}' is partitioned on a path the documents lack; they would all go to one partition",
            config.cosmos.container, config.cosmos.database
        );
    } else {
        println!(
            "ok: container '{}' of database '{}' is partitioned on a path the documents carry",
            config.cosmos.container, config.cosmos.database
        );
    }
    report_indexing(
        &opened.container,
        &layout,
        (&config.cosmos.database, &config.cosmos.container),
    )
    .await?;
    report_history(&opened.container).await?;
    if patch_in_batches(&opened.container, opened.missing_partition_key).await? {
        println!("ok: the server takes Patch in batches (NEWEST_WINS=patch works)");
    } else {
        println!(
            "note: the server refuses Patch in batches: the writer falls back to NEWEST_WINS=etag"
        );
    }
    Ok(())
}

async fn checkpoints(config: WriterConfig, action: CheckpointsAction) -> anyhow::Result<()> {
    match action {
        CheckpointsAction::Show { store } => {
            let kind = store.unwrap_or(if config.eventhubs.blob_checkpoints.is_some() {
                CheckpointStoreKind::Blob
            } else {
                CheckpointStoreKind::Cosmos
            });
            let (scope, store) = open_checkpoints(&config, kind).await?;
            let partitions = transfer::show(store.as_ref(), &scope).await?;
            println!(
                "checkpoints of {}/{}/{} in the {} store:",
                scope.namespace,
                scope.event_hub,
                scope.consumer_group,
                kind.name()
            );
            println!(
                "{:<10} {:>16} {:>20}  owner",
                "partition", "sequence number", "offset"
            );
            let or_none = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            for (partition, state) in partitions {
                println!(
                    "{partition:<10} {:>16} {:>20}  {}",
                    or_none(state.sequence_number.map(|n| n.to_string())),
                    or_none(state.offset),
                    or_none(state.owner)
                );
            }
        }
        CheckpointsAction::Copy { from, to } => {
            anyhow::ensure!(from != to, "--from and --to name the same store");
            let (scope, source) = open_checkpoints(&config, from).await?;
            let (_, target) = open_checkpoints(&config, to).await?;
            let copied = transfer::copy(source.as_ref(), target.as_ref(), &scope).await?;
            println!(
                "copied the checkpoints of {} partition(s) ({}) of {}/{}/{} from the {} store to the {} store",
                copied.len(),
                copied.join(", "),
                scope.namespace,
                scope.event_hub,
                scope.consumer_group,
                from.name(),
                to.name()
            );
        }
    }
    Ok(())
}

/// The consumer group the Event Hubs source reads, and its checkpoint store of `kind`.
async fn open_checkpoints(
    config: &WriterConfig,
    kind: CheckpointStoreKind,
) -> anyhow::Result<(Scope, Box<dyn CheckpointStore>)> {
    let Some(SourceSpec::EventHubs(connection)) = &config.source else {
        anyhow::bail!(
            "WRITER_SOURCE is not an Event Hubs source: checkpoints belong to one (an Event Hubs connection string, or sb://{{namespace}}/{{event hub}})"
        );
    };
    let scope = Scope::new(
        &connection.namespace,
        &connection.entity_path,
        &config.eventhubs.consumer_group,
    );
    let store: Box<dyn CheckpointStore> = match kind {
        CheckpointStoreKind::Cosmos => Box::new(
            CosmosCheckpointStore::open(
                &cosmos_client(&config.cosmos)?,
                &config.cosmos.database,
                &config.eventhubs.checkpoint_container,
                config.cosmos.create_if_missing,
            )
            .await?,
        ),
        CheckpointStoreKind::Blob => {
            let blob = config.eventhubs.blob_checkpoints.as_ref().context(
                "no blob checkpoint store is configured: set CHECKPOINT_BLOB_CONNECTION_STRING (or CHECKPOINT_BLOB_ACCOUNT_URL) and CHECKPOINT_BLOB_CONTAINER",
            )?;
            Box::new(BlobCheckpointStore::open(blob).await?)
        }
    };
    Ok((scope, store))
}

//! The running alerter: the Cosmos DB clients, the rules and fences kept current, the
//! delivery, `/metrics`, the processor and the silent-drone sweep, until a stop.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use cosmos::{ContainerSetup, CosmosClient};
use entra_credential::{EntraCredential, Source};
use fleet_api::Geofences;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{AlerterConfig, GridConfig};
use crate::deliver::{DeadLetter, Delivery, Destination, EventGrid, EventGridAuth, Webhook};
use crate::lease::LeaseStore;
use crate::metrics::{self, Metrics};
use crate::processor;
use crate::record::Records;
use crate::rules::{self, Rules};
use crate::shared::Shared;
use crate::state::StateStore;

/// How often the rules file is looked at.
const RULES_EVERY: Duration = Duration::from_secs(1);
/// How often the fences are read again.
const FENCES_EVERY: Duration = Duration::from_secs(10);

/// Runs the alerter until `stop`; the address `/metrics` listens on is printed at start.
pub async fn run(config: AlerterConfig, stop: CancellationToken) -> anyhow::Result<()> {
    let rules = Rules::read(&config.rules_file)?;
    tracing::info!(rules = rules.0.len(), "rules read");
    let client = CosmosClient::new(entra_credential::cosmos_config(&config.cosmos)?)?;
    let database = &config.cosmos.database;
    let positions = client.container(database, &config.cosmos.container);
    positions.properties().await.with_context(|| {
        format!(
            "cannot read container {database}/{} (check COSMOS_ENDPOINT, COSMOS_DATABASE, COSMOS_CONTAINER)",
            config.cosmos.container
        )
    })?;
    let leases = client.container(database, &config.lease_container);
    leases
        .create_if_missing(&lease_container())
        .await
        .with_context(|| format!("cannot create or read the lease container {} (ALERT_LEASE_CONTAINER; with COSMOS_AUTH=entra create it beforehand, partition key /id)", config.lease_container))?;
    let geofences = Geofences::new(
        client.container(database, &config.geofence_container),
        f64::INFINITY,
    );
    let metrics = Arc::new(Metrics::default());
    let delivery = Delivery::new(
        destinations(&config)?,
        config.source.clone(),
        config.retry_for,
        DeadLetter::new(config.dead_letter_file.clone()),
        metrics.clone(),
    )?;
    let listener = tokio::net::TcpListener::bind(config.metrics_addr)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (ALERT_METRICS_ADDR)",
                config.metrics_addr
            )
        })?;
    println!(
        "alerter: metrics on http://{}/metrics",
        listener.local_addr()?
    );
    tokio::spawn(metrics::serve(listener, metrics.clone(), stop.clone()));

    let (rules_tx, rules_rx) = watch::channel(Arc::new(rules));
    let failures = metrics.clone();
    let watcher = tokio::spawn(rules::watch_file(
        config.rules_file.clone(),
        RULES_EVERY,
        rules_tx,
        move || failures.rules_failed(),
    ));
    let fences = geofences
        .load()
        .await
        .context("cannot read the geofences (COSMOS_GEOFENCE_CONTAINER)")?;
    let shared = Arc::new(Shared {
        positions,
        leases: LeaseStore::new(leases.clone()),
        states: StateStore::new(leases.clone()),
        records: Records::new(leases),
        rules: rules_rx,
        fences: RwLock::new(Arc::new(fences)),
        delivery,
        metrics,
        owner: config.instance.clone(),
        poll: config.poll,
        start: config.start.clone(),
        silent: Mutex::new(Default::default()),
    });
    let refresher = tokio::spawn({
        let shared = shared.clone();
        async move {
            loop {
                tokio::time::sleep(FENCES_EVERY).await;
                match geofences.load().await {
                    Ok(f) => *shared.fences.write().expect("never poisoned") = Arc::new(f),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the geofences again; the fences read before stay")
                    }
                }
            }
        }
    });
    let sweep = tokio::spawn(crate::silent::sweep(
        shared.clone(),
        config.silent_sweep,
        stop.clone(),
    ));
    tracing::info!(instance = %config.instance, "following the change feed");
    let result = processor::run(shared, config.lease_interval, config.lease_expiry, stop).await;
    watcher.abort();
    refresher.abort();
    let _ = sweep.await;
    Ok(result?)
}

/// The lease container: partition key `/id`; only `kind` (the queries' filter) and
/// `recordedAtMs` (the alert records' order) indexed, so a lease or state write is charged
/// for few index terms; expiry on, for the alert records.
fn lease_container() -> ContainerSetup {
    ContainerSetup {
        default_ttl: Some(-1),
        ..ContainerSetup::new("/id").with_indexing_policy(serde_json::json!({
            "indexingMode": "consistent",
            "automatic": true,
            "includedPaths": [{"path": "/kind/?"}, {"path": "/recordedAtMs/?"}],
            "excludedPaths": [{"path": "/*"}],
        }))
    }
}

/// The webhooks and the Event Grid topic the settings name.
fn destinations(config: &AlerterConfig) -> anyhow::Result<Vec<Destination>> {
    let mut out: Vec<Destination> = config
        .webhooks
        .iter()
        .map(|url| {
            Destination::Webhook(Webhook {
                url: url.clone(),
                secret: config.webhook_secret.clone(),
            })
        })
        .collect();
    if let Some(grid) = &config.event_grid {
        let (endpoint, auth) = match grid {
            GridConfig::Key(url, key) => (url.clone(), EventGridAuth::Key(key.clone())),
            GridConfig::Entra(url) => {
                let credential = EntraCredential::new(Source::from_env()?)?;
                (url.clone(), EventGridAuth::Entra(Arc::new(credential)))
            }
        };
        out.push(Destination::EventGrid(EventGrid { endpoint, auth }));
    }
    Ok(out)
}

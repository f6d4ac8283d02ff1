//! The start-up guard: the Cosmos DB client (its requests high priority), the container opened and checked against
//! the document layout, and whether the server takes Patch in batches. Each refusal
//! ([`StartError`]) says what to change.
//!
//! The guard refuses a container partitioned on a path the documents do not carry. With
//! `WRITER_FORCE_MISSING_PARTITION_KEY` it writes anyway, as a misconfigured writer would:
//! every document goes under the undefined partition key, so one physical partition takes
//! every write (the field's hot partition).

use cosmos::{
    BulkConfig, ContainerClient, ContainerSetup, CosmosClient, CosmosConfig, CosmosError, Priority,
};
use settings::AccountAuth;
use telemetry::{DocumentLayout, PartitionKeyPath};

use std::net::SocketAddr;

use crate::config::CosmosSettings;

/// Why the writer cannot start. Each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The container is partitioned on a path the documents do not carry.
    #[error(
        "container '{container}' is partitioned on '{container_path}', but this writer puts the device id at '{configured}' (and /deviceId): every document would land in one logical partition. Set COSMOS_PARTITION_KEY_PATH={container_path} so that documents carry the device id there, or use a container partitioned on /deviceId (WRITER_FORCE_MISSING_PARTITION_KEY=true writes anyway, into that one partition)"
    )]
    PartitionKeyMismatch {
        /// The container.
        container: String,
        /// The container's partition key path.
        container_path: String,
        /// COSMOS_PARTITION_KEY_PATH.
        configured: String,
    },
    /// The container's partition key path cannot be carried by any document layout.
    #[error(
        "container '{container}' has the partition key path '{path}', which documents cannot carry: {reason}"
    )]
    UnusableContainerPath {
        /// The container.
        container: String,
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The database or container does not exist.
    #[error(
        "database '{database}' or container '{container}' does not exist at {endpoint}: create it (partition key /deviceId), or set COSMOS_CREATE_IF_MISSING=true"
    )]
    Missing {
        /// The database.
        database: String,
        /// The container.
        container: String,
        /// The account endpoint.
        endpoint: String,
    },
    /// Cosmos DB refuses the writer's credential.
    #[error("Cosmos DB refuses the writer ({status}): {remedy}. The service said: {message}")]
    Refused {
        /// 401 or 403.
        status: u16,
        /// What to check.
        remedy: &'static str,
        /// The service's message.
        message: String,
    },
    /// A setting is unusable.
    #[error("{0}")]
    Config(String),
    /// Cosmos DB could not be reached or refused.
    #[error("Cosmos DB: {0}")]
    Cosmos(#[from] CosmosError),
    /// The metrics or probes listener could not be bound.
    #[error("cannot listen on {name} {addr}: {source}")]
    Listen {
        /// The setting.
        name: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The dead-letter file cannot be opened.
    #[error("cannot open DEAD_LETTER_FILE: {0}")]
    DeadLetter(std::io::Error),
}

/// A Cosmos DB client for the writer's settings.
pub fn cosmos_client(settings: &CosmosSettings) -> Result<CosmosClient, StartError> {
    let credential = entra_credential::cosmos_credential(&settings.auth)
        .map_err(|e| StartError::Config(e.to_string()))?;
    let mut config = CosmosConfig::new(settings.endpoint.clone(), credential);
    config.accept_invalid_certs = settings.accept_invalid_certs;
    // The writer's requests are the ones a throttled partition must keep serving: under
    // priority-based execution the read API's low-priority queries are throttled first.
    config.priority = Some(Priority::High);
    if let Some(insecure) = &settings.insecure {
        tracing::warn!("{insecure}");
    }
    Ok(CosmosClient::new(config)?)
}

/// What to check when Cosmos DB refuses the writer's credential.
pub fn credential_remedy(auth: &AccountAuth) -> &'static str {
    match auth {
        AccountAuth::Key(_) => {
            "check that COSMOS_KEY (or the file COSMOS_KEY_FILE names) holds the account's current primary or secondary key, and that the account allows key authentication (disableLocalAuth off)"
        }
        AccountAuth::Entra => {
            "give the writer's identity the role \"Cosmos DB Built-in Data Contributor\" on the account (az cosmosdb sql role assignment create --role-definition-id 00000000-0000-0000-0000-000000000002 --principal-id <object id> --scope /), and check its tenant (AZURE_TENANT_ID) and credential (AZURE_CREDENTIAL)"
        }
    }
}

/// A container that passed the startup guard, or was forced past it.
#[derive(Debug, Clone)]
pub struct OpenedContainer {
    /// The container.
    pub container: ContainerClient,
    /// The documents lack the container's partition key (forced past the guard): they go
    /// under the undefined key, all into one logical partition.
    pub missing_partition_key: bool,
}

/// The startup guard: opens the container (creating database and container when told
/// to), and checks that the documents of `layout` carry its partition key. When they do
/// not, it refuses, unless `settings.force_missing_partition_key` says to write anyway
/// (with a loud warning).
pub async fn open_container(
    client: &CosmosClient,
    settings: &CosmosSettings,
    layout: &DocumentLayout,
    default_ttl: Option<i64>,
) -> Result<OpenedContainer, StartError> {
    let container = client.container(&settings.database, &settings.container);
    let properties = match container.properties().await {
        Ok(properties) => properties,
        Err(err) if err.is_not_found() && settings.create_if_missing => {
            let setup = ContainerSetup {
                default_ttl,
                throughput: settings.throughput,
                ..ContainerSetup::new(settings.partition_key_path.to_string())
                    .with_indexing_policy(telemetry::indexing_policy())
            };
            tracing::info!(database = %settings.database, container = %settings.container, "creating the container");
            container.create_if_missing(&setup).await?
        }
        Err(err) if err.is_not_found() => {
            return Err(StartError::Missing {
                database: settings.database.clone(),
                container: settings.container.clone(),
                endpoint: settings.endpoint.to_string(),
            });
        }
        Err(CosmosError::Service(e)) if matches!(e.status, 401 | 403) => {
            return Err(StartError::Refused {
                status: e.status,
                remedy: credential_remedy(&settings.auth),
                message: e.message,
            });
        }
        Err(err) => return Err(err.into()),
    };
    let path_text = properties
        .partition_key
        .paths
        .first()
        .cloned()
        .unwrap_or_default();
    let container_path: PartitionKeyPath =
        path_text
            .parse()
            .map_err(|e: telemetry::document::PartitionKeyPathError| {
                StartError::UnusableContainerPath {
                    container: settings.container.clone(),
                    path: path_text.clone(),
                    reason: e.to_string(),
                }
            })?;
    let single = properties.partition_key.paths.len() == 1;
    if single && layout.carries(&container_path) {
        return Ok(OpenedContainer {
            container,
            missing_partition_key: false,
        });
    }
    let refusal = StartError::PartitionKeyMismatch {
        container: settings.container.clone(),
        container_path: properties.partition_key.paths.join(","),
        configured: layout.partition_key_path().to_string(),
    };
    // The undefined key has one component: a hierarchical key is not forced.
    if !(single && settings.force_missing_partition_key) {
        return Err(refusal);
    }
    tracing::warn!(
        container = %settings.container,
        container_path = %container_path,
        "WRITER_FORCE_MISSING_PARTITION_KEY is set, so the startup guard is overridden: {refusal}. \
         Every document goes under the undefined partition key: ONE physical partition takes \
         every write and throttles (HTTP 429) while the others idle, and adding RU/s does not help"
    );
    Ok(OpenedContainer {
        container,
        missing_partition_key: true,
    })
}

/// Whether the server takes Patch operations in batches: a Patch of a document that does
/// not exist is answered 404 by one that does, while one without Patch in batches (e.g.
/// `@vercel/cosmosdb-server`) refuses the whole batch with 400.
pub async fn patch_in_batches(
    container: &ContainerClient,
    undefined_key: bool,
) -> Result<bool, StartError> {
    const PROBE_ID: &str = "cloud-writer-patch-check";
    let (writer, mut outcomes) = container.bulk_writer::<()>(BulkConfig::default());
    let op = cosmos::BulkOperation {
        kind: cosmos::OperationType::Patch,
        partition_key: if undefined_key {
            cosmos::PartitionKey::Undefined
        } else {
            PROBE_ID.into()
        },
        id: Some(PROBE_ID.into()),
        body: bytes::Bytes::from_static(
            br#"{"operations":[{"op":"set","path":"/patchCheck","value":1}],"condition":"from c where false"}"#,
        ),
        if_match: None,
        context: (),
    };
    if writer.submit(op).await.is_err() {
        return Err(StartError::Config("the bulk writer closed at start".into()));
    }
    writer.close().await;
    let Some(outcome) = outcomes.next().await else {
        return Err(StartError::Config("the Patch check got no outcome".into()));
    };
    match (outcome.status, outcome.whole_request) {
        (400, true) => Ok(false),
        (401 | 403, _) => Err(StartError::Config(format!(
            "Cosmos DB refuses the account key ({}): set COSMOS_KEY (or COSMOS_KEY_FILE) to the account's current key",
            outcome.status
        ))),
        _ => Ok(true),
    }
}

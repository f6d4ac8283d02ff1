//! The published limits `fleet plan` plans with (`deploy/limits.toml`, or an operator's copy
//! with the limits Microsoft raised for them): for each service the page they were read from
//! and when.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::prices::Provenance;

/// The limits shipped in `deploy/limits.toml`.
pub const SHIPPED: &str = include_str!("../../../deploy/limits.toml");

/// Why a limits table cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Not the table's form.
    #[error("{path}: {source}")]
    Form {
        /// The file.
        path: String,
        /// What is wrong.
        source: toml::de::Error,
    },
    /// A limit is zero or negative.
    #[error("{path}: {what} must be a positive number")]
    Limit {
        /// The file.
        path: String,
        /// Which limit.
        what: &'static str,
    },
}

/// IoT Hub's built-in endpoint.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IotHubLimits {
    /// Where they come from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// Partitions a hub gets unless told otherwise.
    pub default_partitions: u64,
    /// Partitions a hub may have.
    pub max_partitions: u64,
}

/// Event Hubs' ingress per partition.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventHubsLimits {
    /// Where they come from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// Events a second into one partition.
    pub events_per_partition_sec: f64,
    /// Bytes a second into one partition.
    pub bytes_per_partition_sec: f64,
}

/// The Device Provisioning Service.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DpsLimits {
    /// Where they come from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// Device registrations a minute, per instance.
    pub registrations_per_minute: f64,
    /// Registrations one instance holds.
    pub max_registrations: u64,
    /// Hubs one instance assigns to.
    pub max_linked_hubs: u64,
}

/// Cosmos DB's quotas per container.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CosmosLimits {
    /// Where they come from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// RU/s a container may have without a support request.
    pub max_ru_per_container: f64,
    /// RU/s a container must have per GB it stores.
    pub min_ru_per_gb: f64,
}

/// Cosmos DB's physical partitions.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionLimits {
    /// Where they come from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// RU/s one physical partition gives.
    pub ru_per_partition: f64,
    /// GB one physical partition stores.
    pub gb_per_partition: f64,
}

/// A limits table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// IoT Hub's built-in endpoint.
    pub iothub: IotHubLimits,
    /// Event Hubs.
    pub eventhubs: EventHubsLimits,
    /// DPS.
    pub dps: DpsLimits,
    /// Cosmos DB's quotas.
    pub cosmos: CosmosLimits,
    /// Cosmos DB's physical partitions.
    pub cosmos_partitions: PartitionLimits,
}

impl Limits {
    /// Reads a table; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Limits, LimitError> {
        let limits: Limits = toml::from_str(text).map_err(|source| LimitError::Form {
            path: path.into(),
            source,
        })?;
        for (what, value) in limits.values() {
            if !(value > 0.0 && value.is_finite()) {
                return Err(LimitError::Limit {
                    path: path.into(),
                    what,
                });
            }
        }
        Ok(limits)
    }

    /// Reads the table in `path`.
    pub fn read(path: &Path) -> Result<Limits, LimitError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| LimitError::Read {
            path: name.clone(),
            source,
        })?;
        Limits::parse(&text, &name)
    }

    /// The shipped table.
    pub fn shipped() -> Limits {
        Limits::parse(SHIPPED, "deploy/limits.toml").expect("the shipped limits parse")
    }

    /// Every limit by its name in the table.
    fn values(&self) -> [(&'static str, f64); 11] {
        [
            (
                "iothub.default_partitions",
                self.iothub.default_partitions as f64,
            ),
            ("iothub.max_partitions", self.iothub.max_partitions as f64),
            (
                "eventhubs.events_per_partition_sec",
                self.eventhubs.events_per_partition_sec,
            ),
            (
                "eventhubs.bytes_per_partition_sec",
                self.eventhubs.bytes_per_partition_sec,
            ),
            (
                "dps.registrations_per_minute",
                self.dps.registrations_per_minute,
            ),
            ("dps.max_registrations", self.dps.max_registrations as f64),
            ("dps.max_linked_hubs", self.dps.max_linked_hubs as f64),
            (
                "cosmos.max_ru_per_container",
                self.cosmos.max_ru_per_container,
            ),
            ("cosmos.min_ru_per_gb", self.cosmos.min_ru_per_gb),
            (
                "cosmos_partitions.ru_per_partition",
                self.cosmos_partitions.ru_per_partition,
            ),
            (
                "cosmos_partitions.gb_per_partition",
                self.cosmos_partitions.gb_per_partition,
            ),
        ]
    }

    /// Where each service's limits come from, as the plan prints them.
    pub fn sources(&self) -> [(&'static str, &Provenance); 5] {
        [
            ("IoT Hub", &self.iothub.provenance),
            ("Event Hubs", &self.eventhubs.provenance),
            ("DPS", &self.dps.provenance),
            ("Cosmos DB quotas", &self.cosmos.provenance),
            ("Cosmos DB partitions", &self.cosmos_partitions.provenance),
        ]
    }
}

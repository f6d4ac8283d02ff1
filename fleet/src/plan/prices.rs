//! The dated price table `fleet plan` costs a fleet with (`deploy/prices.toml`, or a file
//! of the operator's own): one currency, and for each service where its prices were read
//! and when.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The price table shipped in `deploy/prices.toml`.
pub const SHIPPED: &str = include_str!("../../../deploy/prices.toml");

/// Why a price table cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
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
    /// A price is missing or not positive.
    #[error("{path}: {what} must be a positive number")]
    Price {
        /// The file.
        path: String,
        /// Which price.
        what: String,
    },
}

/// Where a service's prices come from.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The page the prices were read from.
    pub source: String,
    /// When they were read (a date).
    pub read: String,
}

/// IoT Hub's prices.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IotHubPrices {
    /// Where they come from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// Price of one unit for a month, by tier name (`B1` ... `S3`).
    pub unit_month: BTreeMap<String, f64>,
    /// How operations are metered against the daily quota.
    pub metering: Metering,
}

/// Cosmos DB's prices.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CosmosPrices {
    /// Where they come from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// Provisioned throughput: every 100 RU/s for an hour, in each region.
    pub per_100_ru_hour: f64,
    /// Storage: a GB for a month, in each region.
    pub per_gb_month: f64,
}

/// A price table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// The currency of every price.
    pub currency: String,
    /// IoT Hub.
    pub iothub: IotHubPrices,
    /// Cosmos DB.
    pub cosmos: CosmosPrices,
}

impl Prices {
    /// Reads a table; `path` names it in errors. Every tier `tiers` names must be priced.
    pub fn parse(text: &str, path: &str, tiers: &[&str]) -> Result<Prices, PriceError> {
        let prices: Prices = toml::from_str(text).map_err(|source| PriceError::Form {
            path: path.into(),
            source,
        })?;
        let positive = |what: String, value: Option<f64>| match value {
            Some(v) if v > 0.0 && v.is_finite() => Ok(()),
            _ => Err(PriceError::Price {
                path: path.into(),
                what,
            }),
        };
        for tier in tiers {
            let price = prices.iothub.unit_month.get(*tier).copied();
            positive(format!("iothub.unit_month.{tier}"), price)?;
        }
        if prices.iothub.metering.block_bytes == 0 {
            return Err(PriceError::Price {
                path: path.into(),
                what: "iothub.metering.block_bytes".into(),
            });
        }
        positive(
            "cosmos.per_100_ru_hour".into(),
            Some(prices.cosmos.per_100_ru_hour),
        )?;
        positive(
            "cosmos.per_gb_month".into(),
            Some(prices.cosmos.per_gb_month),
        )?;
        Ok(prices)
    }

    /// Reads the table in `path`.
    pub fn read(path: &Path, tiers: &[&str]) -> Result<Prices, PriceError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PriceError::Read {
            path: name.clone(),
            source,
        })?;
        Prices::parse(&text, &name, tiers)
    }
}

/// How IoT Hub meters twin and method operations against the daily quota (the price
/// table's `[iothub.metering]`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Metering {
    /// Where the rules come from.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// Every billable operation is charged in blocks of this many bytes (basic and
    /// standard tiers).
    pub block_bytes: u64,
}

impl Metering {
    /// Messages one operation of `bytes` is charged (an empty one is still one).
    pub fn messages(&self, bytes: u64) -> f64 {
        bytes.div_ceil(self.block_bytes.max(1)).max(1) as f64
    }
}

//! The state one running endpoint shares between its server tasks, its admin endpoints and the
//! [`crate::CosmosSim`] handle: the store, the account key and Entra trust, the defaults of new containers, the
//! faults and the counters; and the run-time changes both the handle and the admin endpoints
//! make (key rotation, range splits, throughput). It knows nothing of HTTP.

use crate::entra::EntraAccess;
use crate::error::SimError;
use crate::faults::Faults;
use crate::stats::{Counters, Stats};
use crate::store::Store;
use cosmos_wire::auth::MasterKey;
use cosmos_wire::resources::PartitionKeyRange;
use std::net::SocketAddr;

/// What one running endpoint holds: its documents, account key, container defaults, faults
/// and counters. The server tasks and the [`crate::CosmosSim`] handle share it.
#[derive(Debug)]
pub(crate) struct EndpointState {
    pub store: Store,
    /// The account key requests must be signed with; replaced by [`EndpointState::rotate_key`].
    pub key: parking_lot::RwLock<MasterKey>,
    /// Whether the key is taken (`disableLocalAuth` off).
    pub local_auth: bool,
    /// The Entra ID tokens taken, if any.
    pub entra: Option<EntraAccess>,
    pub partitions: usize,
    /// The RU/s of new containers.
    pub default_ru: f64,
    pub faults: Faults,
    pub counters: Counters,
    pub addr: SocketAddr,
}

impl EndpointState {
    /// A snapshot of requests, operations, throttling and the heat map.
    pub fn stats(&self) -> Stats {
        Stats::collect(&self.store, &self.counters)
    }

    /// Splits a live range of a container in two.
    pub fn split_range(
        &self,
        db: &str,
        coll: &str,
        range_id: &str,
    ) -> Result<(PartitionKeyRange, PartitionKeyRange), SimError> {
        let c = self
            .store
            .container(db, coll)
            .ok_or_else(|| SimError::NoContainer(format!("{db}/{coll}")))?;
        let children = c
            .split(range_id)
            .ok_or_else(|| SimError::NoRange(range_id.to_string()))?;
        tracing::info!(db, coll, range_id, left = %children.0.id, right = %children.1.id, "range split");
        Ok(children)
    }

    /// Replaces the account key (base64).
    pub fn rotate_key(&self, key: &str) -> Result<(), SimError> {
        let key = MasterKey::from_base64(key)?;
        *self.key.write() = key;
        tracing::info!("account key rotated");
        Ok(())
    }

    /// Changes a container's provisioned RU/s.
    pub fn set_ru_per_sec(&self, db: &str, coll: &str, ru: f64) -> Result<(), SimError> {
        check_ru_per_sec(ru)?;
        let c = self
            .store
            .container(db, coll)
            .ok_or_else(|| SimError::NoContainer(format!("{db}/{coll}")))?;
        c.set_ru_per_sec(ru);
        Ok(())
    }
}

/// Checks a provisioned throughput: at least 1 RU/s (`f64::INFINITY` never throttles).
pub(crate) fn check_ru_per_sec(ru: f64) -> Result<(), SimError> {
    if ru.is_nan() || ru < 1.0 {
        return Err(SimError::Invalid(format!(
            "RU/s must be at least 1, not {ru}"
        )));
    }
    Ok(())
}

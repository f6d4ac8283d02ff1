//! The state one running endpoint shares between its server tasks, its admin endpoints and the
//! [`crate::CosmosSim`] handle: the store, the account key, the defaults of new containers, the
//! faults and the counters; and the run-time changes both the handle and the admin endpoints
//! make (key rotation, range splits, throughput). It knows nothing of HTTP.

use crate::error::SimError;
use crate::faults::Faults;
use crate::stats::{Counters, Stats};
use crate::store::Store;
use cosmos_wire::auth::MasterKey;
use cosmos_wire::resources::PartitionKeyRange;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

/// State shared by the server tasks and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: Store,
    /// The account key requests must be signed with; replaced by [`Shared::rotate_key`].
    pub key: parking_lot::RwLock<MasterKey>,
    pub partitions: usize,
    /// Default RU/s of new containers (f64 bits).
    pub default_ru: AtomicU64,
    pub faults: Faults,
    pub counters: Counters,
    pub addr: SocketAddr,
}

impl Shared {
    /// The RU/s a container created now gets.
    pub fn default_ru(&self) -> f64 {
        f64::from_bits(self.default_ru.load(Ordering::Relaxed))
    }

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
        if ru.is_nan() || ru < 1.0 {
            return Err(SimError::Invalid(format!(
                "RU/s must be at least 1, not {ru}"
            )));
        }
        let c = self
            .store
            .container(db, coll)
            .ok_or_else(|| SimError::NoContainer(format!("{db}/{coll}")))?;
        c.set_ru_per_sec(ru);
        Ok(())
    }
}

//! What every range's follower shares ([`Shared`]: the containers, the rules and fences in
//! force, the delivery, the metrics), and a lease this instance holds ([`Held`]), whose
//! every write goes through one lock so that renewals and checkpoints do not race.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use cosmos::{ContainerClient, FeedPosition};
use fleet_api::FenceSet;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::alert::Position;
use crate::deliver::Delivery;
use crate::lease::{Lease, LeaseStore};
use crate::metrics::{Metrics, Purpose};
use crate::record::Records;
use crate::rules::Rules;
use crate::state::StateStore;

/// What every follower shares.
pub struct Shared {
    /// The positions container.
    pub positions: ContainerClient,
    /// The leases.
    pub leases: LeaseStore,
    /// The drones' judging state.
    pub states: StateStore,
    /// The alerts delivered, for fleet-api.
    pub records: Records,
    /// The rules in force.
    pub rules: watch::Receiver<Arc<Rules>>,
    /// The fences, read again from time to time.
    pub fences: RwLock<Arc<FenceSet>>,
    /// Where alerts go.
    pub delivery: Delivery,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// This instance's name in the leases.
    pub owner: String,
    /// How often a quiet range is asked again.
    pub poll: Duration,
    /// Where a range without a continuation starts.
    pub start: FeedPosition,
    /// The followers that run, by range: where silent drones of the range go.
    pub silent: Mutex<HashMap<String, mpsc::Sender<Position>>>,
}

/// A lease this instance holds.
pub struct Held {
    /// The lease as last written (every write goes through this lock).
    pub lease: tokio::sync::Mutex<Lease>,
    /// Cancelled when the lease is lost or the instance stops.
    pub stop: CancellationToken,
    renewed: Mutex<Instant>,
    /// The continuation of the last page whose alerts are all delivered or dead-lettered:
    /// what the next write of the lease checkpoints.
    handled: Mutex<Option<String>>,
}

impl Held {
    /// `lease`, just written by this instance, stopped by `stop`.
    pub fn new(lease: Lease, stop: CancellationToken) -> Self {
        Held {
            lease: tokio::sync::Mutex::new(lease),
            stop,
            renewed: Mutex::new(Instant::now()),
            handled: Mutex::new(None),
        }
    }

    /// How long since the lease was last written.
    pub fn since_written(&self) -> std::time::Duration {
        self.renewed.lock().expect("never poisoned").elapsed()
    }

    /// Records that every alert up to `continuation` is delivered or dead-lettered; the next
    /// write of the lease (a renewal, or [`Held::write`]) checkpoints it.
    pub fn handled(&self, continuation: String) {
        *self.handled.lock().expect("never poisoned") = Some(continuation);
    }

    /// Writes `change` to the lease, with the handled continuation; false (and the follower
    /// stopped) if another instance took it. A failed write is retried at the next call.
    pub async fn write(
        &self,
        shared: &Shared,
        change: impl FnOnce(&mut Lease),
    ) -> Result<bool, cosmos::CosmosError> {
        let mut lease = self.lease.lock().await;
        let mut next = lease.clone();
        change(&mut next);
        if let Some(handled) = self.handled.lock().expect("never poisoned").clone() {
            next.continuation = Some(handled);
        }
        let (written, ru) = shared.leases.write(&next).await?;
        shared.metrics.charge(Purpose::Leases, ru);
        match written {
            Some(written) => {
                *lease = written;
                *self.renewed.lock().expect("never poisoned") = Instant::now();
                Ok(true)
            }
            None => {
                tracing::info!(range = %lease.range, "lease taken by another instance");
                self.stop.cancel();
                Ok(false)
            }
        }
    }
}

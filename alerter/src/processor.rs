//! The change feed processor: at every `ALERT_LEASE_INTERVAL` it renews the leases this
//! instance holds, reads every lease and takes what [`crate::lease::balance`] says, and runs
//! one follower ([`crate::range`]) per lease held. A lease that another instance took (a
//! write answered 412), or that could not be renewed for `ALERT_LEASE_EXPIRY`, stops its
//! follower. At shutdown the followers stop and the leases are released, so that the other
//! instances take them at their next round instead of after the expiry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use cosmos::{ContainerClient, FeedPosition};
use fleet_api::geofences::FenceSet;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::alert::Position;
use crate::deliver::Delivery;
use crate::lease::{Lease, LeaseStore, balance, now_ms};
use crate::metrics::{Metrics, Purpose};
use crate::rules::Rules;
use crate::state::StateStore;

/// Silent drones waiting for their range's follower.
const SILENT_QUEUE: usize = 1024;

/// What every follower shares.
pub struct Shared {
    /// The positions container.
    pub positions: ContainerClient,
    /// The leases.
    pub leases: LeaseStore,
    /// The drones' judging state.
    pub states: StateStore,
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
}

impl Held {
    /// Writes `change` to the lease; false (and the follower stopped) if another instance
    /// took it. A failed write is retried at the next call.
    pub async fn write(
        &self,
        shared: &Shared,
        change: impl FnOnce(&mut Lease),
    ) -> Result<bool, cosmos::CosmosError> {
        let mut lease = self.lease.lock().await;
        let mut next = lease.clone();
        change(&mut next);
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

/// Runs the processor until `stop`.
pub async fn run(
    shared: Arc<Shared>,
    interval: Duration,
    expiry: Duration,
    stop: CancellationToken,
) -> Result<(), cosmos::CosmosError> {
    let ranges = shared.positions.range_map().await?;
    shared.leases.ensure(&ranges).await?;
    let mut held: HashMap<String, (Arc<Held>, JoinHandle<()>)> = HashMap::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        held.retain(|_, (h, _)| !h.stop.is_cancelled());
        for (h, _) in held.values() {
            let renewed = h.write(&shared, |_| {}).await;
            if let Err(e) = renewed {
                let since = h.renewed.lock().expect("never poisoned").elapsed();
                tracing::warn!(error = %e, ?since, "lease renewal failed");
                if since > expiry {
                    h.stop.cancel();
                }
            }
        }
        held.retain(|_, (h, _)| !h.stop.is_cancelled());
        let all = match shared.leases.all().await {
            Ok((all, ru)) => {
                shared.metrics.charge(Purpose::Leases, ru);
                all
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the leases");
                continue;
            }
        };
        // A lease under this name that no follower runs (a restart under a fixed
        // ALERT_INSTANCE) is free for this instance.
        let seen: Vec<Lease> = all
            .into_iter()
            .map(|mut l| {
                if l.owner.as_deref() == Some(&shared.owner) && !held.contains_key(&l.id) {
                    l.owner = None;
                }
                l
            })
            .collect();
        for id in balance(&seen, &shared.owner, now_ms(), expiry) {
            let Some(lease) = seen.iter().find(|l| l.id == id) else {
                continue;
            };
            let mut claim = lease.clone();
            claim.owner = Some(shared.owner.clone());
            match shared.leases.write(&claim).await {
                Ok((Some(lease), ru)) => {
                    shared.metrics.charge(Purpose::Leases, ru);
                    tracing::info!(range = %lease.range, "lease taken");
                    let (tx, rx) = mpsc::channel(SILENT_QUEUE);
                    shared
                        .silent
                        .lock()
                        .expect("never poisoned")
                        .insert(lease.range.clone(), tx);
                    let h = Arc::new(Held {
                        lease: tokio::sync::Mutex::new(lease),
                        stop: stop.child_token(),
                        renewed: Mutex::new(Instant::now()),
                    });
                    let task = tokio::spawn(crate::range::follow(shared.clone(), h.clone(), rx));
                    held.insert(id, (h, task));
                }
                Ok((None, _)) => tracing::debug!(%id, "another instance took the lease first"),
                Err(e) => tracing::warn!(error = %e, %id, "cannot take the lease"),
            }
        }
        shared.metrics.leases_held(held.len());
    }
    for (h, task) in held.into_values() {
        h.stop.cancel();
        let _ = task.await;
        let released = h.write(&shared, |l| l.owner = None).await;
        if let Err(e) = released {
            tracing::warn!(error = %e, "cannot release a lease; it expires instead");
        }
    }
    Ok(())
}

//! The change feed processor: at every `ALERT_LEASE_INTERVAL` it renews the leases this
//! instance holds, reads every lease and takes what [`crate::lease::balance`] says, and runs
//! one follower ([`crate::range`]) per lease held. A lease that another instance took (a
//! write answered 412), or that could not be renewed for `ALERT_LEASE_EXPIRY`, stops its
//! follower. At shutdown the followers stop and the leases are released, so that the other
//! instances take them at their next round instead of after the expiry.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::lease::{Lease, balance, now_ms};
use crate::metrics::Purpose;
use crate::shared::{Held, Shared};

/// Silent drones waiting for their range's follower.
const SILENT_QUEUE: usize = 1024;

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
                let since = h.since_written();
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
        let seen = as_seen(all, &shared.owner, |id| held.contains_key(id), now_ms());
        for id in balance(&seen, &shared.owner, now_ms(), expiry) {
            let Some(lease) = seen
                .iter()
                .find(|l| l.id == id && !held.contains_key(&l.id))
            else {
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
                    let h = Arc::new(Held::new(lease, stop.child_token()));
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

/// The leases as this instance judges them: one under its name that no follower runs (a
/// restart under a fixed `ALERT_INSTANCE`) is free; one its follower runs is held now,
/// however late its last renewal landed (a busy runtime), so that the instance never takes
/// its own lease again and starts a second follower that replays the range. The renewal
/// check above is what gives up a lease that could not be renewed.
fn as_seen(all: Vec<Lease>, me: &str, runs: impl Fn(&str) -> bool, now_ms: i64) -> Vec<Lease> {
    all.into_iter()
        .map(|mut l| {
            if runs(&l.id) {
                l.owner = Some(me.to_owned());
                l.renewed_at_ms = l.renewed_at_ms.max(now_ms);
            } else if l.owner.as_deref() == Some(me) {
                l.owner = None;
            }
            l
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(id: &str, owner: Option<&str>, renewed_at_ms: i64) -> Lease {
        Lease {
            id: id.into(),
            kind: "lease".into(),
            range: id.into(),
            owner: owner.map(str::to_string),
            continuation: None,
            renewed_at_ms,
            etag: None,
        }
    }

    #[test]
    fn a_lease_whose_follower_runs_is_never_taken_again_however_late_its_renewal() {
        let expiry = Duration::from_secs(3);
        let now = 100_000;
        // Renewed 10 s ago (a starved runtime): past the expiry.
        let all = vec![lease("r0", Some("me"), now - 10_000)];
        let seen = as_seen(all, "me", |id| id == "r0", now);
        assert!(balance(&seen, "me", now, expiry).is_empty());
    }

    #[test]
    fn a_lease_under_this_name_without_a_follower_is_free() {
        let expiry = Duration::from_secs(3);
        let now = 100_000;
        let all = vec![lease("r0", Some("me"), now)];
        let seen = as_seen(all, "me", |_| false, now);
        assert_eq!(balance(&seen, "me", now, expiry), vec!["r0".to_string()]);
    }
}

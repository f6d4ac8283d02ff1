//! One range's follower: reads the range's change feed from the lease's continuation, judges
//! each changed drone ([`crate::judge`]), delivers the alerts ([`crate::deliver`]), writes
//! the states that changed ([`crate::state`]) and only then checkpoints the page's
//! continuation in the lease. A crash between delivery and checkpoint replays the page: the
//! same positions judged from the same states give the same alerts with the same ids.
//!
//! Between pages, it judges the silent drones of its range that the sweep
//! ([`crate::silent`]) found, so that one task writes a drone's state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use cosmos::{FeedPosition, PartitionKey};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::alert::Position;
use crate::judge::{DroneState, judge, judge_silence};
use crate::lease::now_ms;
use crate::metrics::Purpose;
use crate::shared::{Held, Shared};

/// Documents per feed page.
const PAGE: u32 = 500;

/// Longest time between checkpoints of a busy range: a crash replays at most this much of
/// the feed (renewals checkpoint too, every `ALERT_LEASE_INTERVAL`).
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// Wait after a failed request before trying again.
const AGAIN: Duration = Duration::from_secs(1);

/// What is being judged.
enum Judging {
    /// New positions.
    Changes,
    /// Last positions of silent drones, at a time (Unix ms).
    Silence(i64),
}

/// Follows the range of `held` until its lease is lost or the instance stops.
pub async fn follow(shared: Arc<Shared>, held: Arc<Held>, mut silent: mpsc::Receiver<Position>) {
    let (range, mut from) = {
        let lease = held.lease.lock().await;
        let from = match &lease.continuation {
            Some(etag) => FeedPosition::After(etag.clone()),
            None => shared.start.clone(),
        };
        (lease.range.clone(), from)
    };
    let mut states: HashMap<String, DroneState> = HashMap::new();
    let stop = held.stop.clone();
    tracing::info!(%range, "following the range");
    if !recover(&shared, &held, &range, &mut states).await {
        return finish(&shared, &range);
    }
    while !stop.is_cancelled() {
        let page = tokio::select! {
            _ = stop.cancelled() => break,
            page = shared.positions.change_feed_page(&range, &from, Some(PAGE)) => page,
        };
        let page = match page {
            Ok(page) => page,
            Err(e) if e.is_range_gone() => {
                split(&shared, &held, &range, &from).await;
                break;
            }
            Err(e) => {
                tracing::warn!(%range, error = %e, "cannot read the change feed");
                pause(&stop, AGAIN).await;
                continue;
            }
        };
        shared.metrics.charge(Purpose::Feed, page.request_charge);
        shared.metrics.changes(page.documents.len());
        let positions: Vec<Position> = page
            .documents
            .iter()
            .filter_map(Position::from_document)
            .collect();
        if !handle(&shared, &held, &mut states, &positions, Judging::Changes).await {
            break;
        }
        if page.next != from {
            if let FeedPosition::After(etag) = &page.next {
                held.handled(etag.clone());
            }
            from = page.next.clone();
            if held.since_written() >= CHECKPOINT_EVERY {
                match held.write(&shared, |_| {}).await {
                    Ok(true) => {}
                    Ok(false) => break,
                    // The next renewal or page writes it.
                    Err(e) => tracing::warn!(%range, error = %e, "cannot checkpoint"),
                }
            }
        }
        let mut found = Vec::new();
        if page.documents.len() < PAGE as usize {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(shared.poll) => {}
                Some(p) = silent.recv() => found.push(p),
            }
        }
        while let Ok(p) = silent.try_recv() {
            found.push(p);
        }
        if !handle(
            &shared,
            &held,
            &mut states,
            &found,
            Judging::Silence(now_ms()),
        )
        .await
        {
            break;
        }
    }
    finish(&shared, &range);
}

/// Hands the lease of `range`, which split, to its children, from `from` (every change
/// before it handled); the follower stops after it.
async fn split(shared: &Shared, held: &Held, range: &str, from: &FeedPosition) {
    let Some(ranges) = retrying(&held.stop, "cannot read the ranges after a split", || {
        shared.positions.refresh_ranges()
    })
    .await
    else {
        return;
    };
    let children: Vec<_> = ranges
        .ranges()
        .iter()
        .filter(|r| r.parents.iter().any(|p| p == range))
        .cloned()
        .collect();
    if children.is_empty() {
        tracing::error!(%range, "the range is gone and no range names it as its parent; restart the alerter");
        return;
    }
    let continuation = match from {
        FeedPosition::After(etag) => Some(etag.clone()),
        _ => None,
    };
    let lease = held.lease.lock().await.clone();
    let handed = retrying(&held.stop, "cannot hand a split range's lease over", || {
        shared.leases.split(&lease, continuation.clone(), &children)
    })
    .await;
    if handed.is_some() {
        tracing::info!(%range, children = children.len(), "the range split: its children's leases are free to take");
    }
    held.stop.cancel();
}

fn finish(shared: &Shared, range: &str) {
    shared.silent.lock().expect("never poisoned").remove(range);
    tracing::info!(%range, "stopped following the range");
}

/// Sleeps `wait` unless stopped first; false when stopped.
async fn pause(stop: &tokio_util::sync::CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}

/// Retries `attempt` every [`AGAIN`] until it succeeds (its value) or the follower stops
/// (none), logging each failure as `what`.
async fn retrying<T, F: Future<Output = Result<T, cosmos::CosmosError>>>(
    stop: &tokio_util::sync::CancellationToken,
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> Option<T> {
    loop {
        match attempt().await {
            Ok(value) => return Some(value),
            Err(e) => {
                tracing::warn!(error = %e, "{what}");
                if !pause(stop, AGAIN).await {
                    return None;
                }
            }
        }
    }
}

/// Delivers `events` (again while the dead-letter file cannot be written) and records
/// them for fleet-api; false if the follower stopped first.
async fn deliver(shared: &Shared, held: &Held, events: &[Value]) -> bool {
    loop {
        let delivered = tokio::select! {
            _ = held.stop.cancelled() => return false,
            d = shared.delivery.deliver(events) => d,
        };
        match delivered {
            Ok(outcomes) => {
                for (event, outcome) in events.iter().zip(outcomes) {
                    // Best effort: the record is for people, the delivery is done.
                    match shared.records.write(event, outcome).await {
                        Ok(ru) => shared.metrics.charge(Purpose::Records, ru),
                        Err(e) => tracing::warn!(error = %e, "cannot record an alert"),
                    }
                }
                return true;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot write the dead-letter file; delivering again");
                if !pause(&held.stop, AGAIN).await {
                    return false;
                }
            }
        }
    }
}

/// Delivers the alerts left pending in the outboxes of this range's drones (by an instance
/// that stopped between writing and clearing them), then clears them; false if the follower
/// stopped first.
async fn recover(
    shared: &Shared,
    held: &Held,
    range: &str,
    states: &mut HashMap<String, DroneState>,
) -> bool {
    let Some((pending, ru)) = retrying(&held.stop, "cannot read the pending alerts", || {
        shared.states.pending()
    })
    .await
    else {
        return false;
    };
    shared.metrics.charge(Purpose::State, ru);
    let Some(ranges) = retrying(&held.stop, "cannot read the ranges", || {
        shared.positions.range_map()
    })
    .await
    else {
        return false;
    };
    for stored in pending {
        let key = PartitionKey::from(stored.device_id.as_str());
        if ranges.range_of_key(&key).id != range {
            continue;
        }
        tracing::info!(device = %stored.device_id, alerts = stored.pending.len(), "delivering alerts left pending");
        if !deliver(shared, held, &stored.pending).await {
            return false;
        }
        let cleared = retrying(&held.stop, "cannot write a drone's state", || {
            shared.states.write(&stored.device_id, &stored.state, &[])
        })
        .await;
        let Some(ru) = cleared else { return false };
        shared.metrics.charge(Purpose::State, ru);
        states.insert(stored.device_id.clone(), stored.state);
    }
    true
}

/// Judges `positions`; writes each drone's alerts into its outbox with its new state,
/// delivers them, then clears the outboxes and writes the other states that changed; false
/// if the follower stopped first.
async fn handle(
    shared: &Shared,
    held: &Held,
    states: &mut HashMap<String, DroneState>,
    positions: &[Position],
    judging: Judging,
) -> bool {
    if positions.is_empty() {
        return true;
    }
    let stop = &held.stop;
    let rules = shared.rules.borrow().clone();
    let fences = shared.fences.read().expect("never poisoned").clone();
    let mut events: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut changed = BTreeSet::new();
    for p in positions {
        if !states.contains_key(&p.device_id) {
            let Some((stored, ru)) = retrying(stop, "cannot read a drone's state", || {
                shared.states.read(&p.device_id)
            })
            .await
            else {
                return false;
            };
            shared.metrics.charge(Purpose::State, ru);
            if !stored.pending.is_empty() {
                // Left by an instance that stopped before clearing them.
                events
                    .entry(p.device_id.clone())
                    .or_default()
                    .extend(stored.pending);
                changed.insert(p.device_id.clone());
            }
            states.insert(p.device_id.clone(), stored.state);
        }
        let state = states.get_mut(&p.device_id).expect("inserted above");
        let before = state.clone();
        let alerts = match judging {
            Judging::Changes => judge(&rules, &fences, state, p),
            Judging::Silence(now) => judge_silence(&rules, state, p, now),
        };
        if !alerts.is_empty() {
            events
                .entry(p.device_id.clone())
                .or_default()
                .extend(alerts.iter().map(|a| shared.delivery.event(a)));
        }
        if *state != before {
            changed.insert(p.device_id.clone());
        }
    }
    for (device, pending) in &events {
        let Some(ru) = retrying(stop, "cannot write a drone's outbox", || {
            shared.states.write(device, &states[device], pending)
        })
        .await
        else {
            return false;
        };
        shared.metrics.charge(Purpose::State, ru);
    }
    let all: Vec<Value> = events.into_values().flatten().collect();
    if !deliver(shared, held, &all).await {
        return false;
    }
    for device in changed {
        let Some(ru) = retrying(stop, "cannot write a drone's state", || {
            shared.states.write(&device, &states[&device], &[])
        })
        .await
        else {
            return false;
        };
        shared.metrics.charge(Purpose::State, ru);
    }
    true
}

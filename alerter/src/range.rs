//! One range's follower: reads the range's change feed from the lease's continuation, judges
//! each changed drone ([`crate::judge`]), delivers the alerts ([`crate::deliver`]), writes
//! the states that changed ([`crate::state`]) and only then checkpoints the page's
//! continuation in the lease. A crash between delivery and checkpoint replays the page: the
//! same positions judged from the same states give the same alerts with the same ids.
//!
//! Between pages, it judges the silent drones of its range that the sweep
//! ([`crate::silent`]) found, so that one task writes a drone's state.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use cosmos::FeedPosition;
use tokio::sync::mpsc;

use crate::alert::Position;
use crate::judge::{DroneState, judge, judge_silence};
use crate::lease::now_ms;
use crate::metrics::Purpose;
use crate::shared::{Held, Shared};

/// Documents per feed page.
const PAGE: u32 = 500;

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
    while !stop.is_cancelled() {
        let page = tokio::select! {
            _ = stop.cancelled() => break,
            page = shared.positions.change_feed_page(&range, &from, Some(PAGE)) => page,
        };
        let page = match page {
            Ok(page) => page,
            Err(e) if e.is_range_gone() => {
                tracing::error!(%range, "the range split: restart the alerter to follow its children");
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
            let FeedPosition::After(etag) = &page.next else {
                continue;
            };
            loop {
                match held
                    .write(&shared, |l| l.continuation = Some(etag.clone()))
                    .await
                {
                    Ok(true) => break,
                    Ok(false) => return finish(&shared, &range),
                    Err(e) => {
                        tracing::warn!(%range, error = %e, "cannot checkpoint; trying again");
                        if !pause(&stop, AGAIN).await {
                            return finish(&shared, &range);
                        }
                    }
                }
            }
            from = page.next;
        }
        let mut found = Vec::new();
        if page.documents.is_empty() {
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

/// Judges `positions`, delivers their alerts and writes the states that changed; false if
/// the follower stopped first.
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
    let mut alerts = Vec::new();
    let mut changed = BTreeSet::new();
    for p in positions {
        if !states.contains_key(&p.device_id) {
            let state = loop {
                match shared.states.read(&p.device_id).await {
                    Ok((state, ru)) => {
                        shared.metrics.charge(Purpose::State, ru);
                        break state;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read a drone's state");
                        if !pause(stop, AGAIN).await {
                            return false;
                        }
                    }
                }
            };
            states.insert(p.device_id.clone(), state);
        }
        let state = states.get_mut(&p.device_id).expect("inserted above");
        let before = state.clone();
        alerts.extend(match judging {
            Judging::Changes => judge(&rules, &fences, state, p),
            Judging::Silence(now) => judge_silence(&rules, state, p, now),
        });
        if *state != before {
            changed.insert(p.device_id.clone());
        }
    }
    loop {
        let delivered = tokio::select! {
            _ = stop.cancelled() => return false,
            d = shared.delivery.deliver(&alerts) => d,
        };
        match delivered {
            Ok(()) => break,
            Err(e) => {
                tracing::error!(error = %e, "cannot write the dead-letter file; delivering again");
                if !pause(stop, AGAIN).await {
                    return false;
                }
            }
        }
    }
    for device in changed {
        loop {
            match shared.states.write(&device, &states[&device]).await {
                Ok(ru) => {
                    shared.metrics.charge(Purpose::State, ru);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write a drone's state");
                    if !pause(stop, AGAIN).await {
                        return false;
                    }
                }
            }
        }
    }
    true
}

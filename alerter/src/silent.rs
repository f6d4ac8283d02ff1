//! The search for silent drones: a drone that stopped reporting changes nothing in the feed,
//! so every `ALERT_SILENT_SWEEP` one query over the latest documents asks for the drones
//! whose last position is older than the shortest `silentAfter` (and younger than a day, so
//! that drones parked long ago stay quiet), with their agent's connection state, and hands
//! each to the follower of its range, if this instance holds it; the follower judges it
//! ([`crate::judge::judge_silence`]).
//!
//! Cost: one cross-partition query per sweep and instance, a few RU per range plus about 1 RU
//! per KB of silent drones returned; between silences it returns nothing. Documents are
//! routed by their partition key, the device id (`COSMOS_PARTITION_KEY_PATH` `/deviceId`).

use std::sync::Arc;
use std::time::Duration;

use cosmos::{PartitionKey, QueryParameter, QueryRequest, QueryScope};
use tokio_util::sync::CancellationToken;

use crate::alert::Position;
use crate::lease::now_ms;
use crate::metrics::Purpose;
use crate::shared::Shared;

/// How far back a last position counts.
const LOOKBACK: Duration = Duration::from_secs(24 * 3600);

/// Sweeps every `every` until `stop`.
pub async fn sweep(shared: Arc<Shared>, every: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(silence) = shared.rules.borrow().shortest_silence() else {
            continue;
        };
        if let Err(e) = once(&shared, silence).await {
            tracing::warn!(error = %e, "the search for silent drones failed");
        }
    }
}

async fn once(shared: &Shared, silence: Duration) -> Result<(), cosmos::CosmosError> {
    if shared.silent.lock().expect("never poisoned").is_empty() {
        return Ok(());
    }
    let now = now_ms();
    let query = QueryRequest {
        query: "SELECT c.deviceId, c.kind, c.deviceTime, c.deviceTimeMs, c.location, c.altM, c.batteryPct, \
                c.agentConnected, c.agentDisconnectedAt \
                FROM c WHERE c.kind = 'latest' AND c.deviceTimeMs < @before AND c.deviceTimeMs > @after"
            .into(),
        parameters: vec![
            QueryParameter {
                name: "@before".into(),
                value: (now - silence.as_millis() as i64).into(),
            },
            QueryParameter {
                name: "@after".into(),
                value: (now - LOOKBACK.as_millis() as i64).into(),
            },
        ],
    };
    let answer = shared
        .positions
        .query(&query, QueryScope::AllRanges)
        .await?;
    shared.metrics.charge(Purpose::Sweep, answer.request_charge);
    let ranges = shared.positions.range_map().await?;
    let followers = shared.silent.lock().expect("never poisoned").clone();
    for p in answer.documents.iter().filter_map(Position::from_document) {
        let range = &ranges
            .range_of_key(&PartitionKey::from(p.device_id.as_str()))
            .id;
        if let Some(follower) = followers.get(range) {
            // A full queue: the next sweep finds the drone again.
            let _ = follower.try_send(p);
        }
    }
    Ok(())
}

//! The sink's outcome task: each bulk answer to the write engine ([`super::engine`]),
//! by what it answered (a position, an agent fact, a track segment), and the
//! throttling counts published every half second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cosmos::{BulkOutcomes, Outcome};

use super::engine::WriteEngine;
use super::in_flight::{Ctx, OutcomeInfo};

pub(super) async fn outcome_loop(engine: Arc<WriteEngine>, mut outcomes: BulkOutcomes<Ctx>) {
    let mut last_stats = Instant::now();
    while let Some(outcome) = outcomes.next().await {
        let Outcome {
            context,
            status,
            substatus,
            request_charge,
            etag,
            range_id,
            error,
            whole_request,
            ..
        } = outcome;
        engine.metrics.cosmos_op(status, substatus);
        engine
            .metrics
            .request_units(&range_id, context.kind(), request_charge);
        let info = OutcomeInfo {
            status,
            error,
            etag,
            whole_request,
        };
        match context {
            Ctx::Latest(pending, step) => engine.on_latest(pending, step, info).await,
            Ctx::Agent(pending, step) => engine.on_agent(pending, step, info).await,
            Ctx::Segment(pending, step) => engine.on_segment(pending, step, info).await,
        }
        if last_stats.elapsed() >= Duration::from_millis(500) {
            last_stats = Instant::now();
            publish_stats(&engine);
        }
    }
    publish_stats(&engine);
}

fn publish_stats(engine: &WriteEngine) {
    for (range, stats) in engine.writer.stats().ranges {
        engine
            .metrics
            .set_throttled(&range, stats.throttled_operations);
    }
}

//! The running writer's task and its orderly shutdown (SIGTERM, or
//! [`super::Writer::shutdown`]): the source stops taking messages, the pipeline finishes
//! its batch, the sink drives every in-flight write to its final outcome (within
//! [`DRAIN_TIMEOUT`]), the source acknowledges (PUBACK, checkpoint) what became final, and
//! the writer returns. Stopped while the stream is held, nothing can become final: the
//! writer returns at once with [`RunError::Held`].

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::summary::{log_summary, summarise};
use crate::metrics::{HoldReason, Metrics};
use crate::pipeline::reject::Rejects;
use crate::pipeline::{self, PipelineSettings};
use crate::sink::CosmosSink;
use crate::source::{Source, SourceControl, SourceError, queue};

/// Longest wait for in-flight writes at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a running writer stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// In-flight writes did not finish within the drain timeout.
    #[error(
        "in-flight writes did not finish within {0:?}; their messages were not acknowledged and will be delivered again"
    )]
    DrainTimeout(Duration),
    /// Stopped while holding the stream (Cosmos DB refused every write).
    #[error(
        "stopped while holding the stream ({0}): the positions not written were not acknowledged and will be delivered again"
    )]
    Held(HoldReason),
    /// A task panicked.
    #[error("a writer task failed: {0}")]
    Task(String),
}

/// Runs source, pipeline and sink until `stop`, then shuts them down in order.
pub(super) async fn run(
    source: Box<dyn Source>,
    sink: CosmosSink,
    settings: PipelineSettings,
    rejects: Rejects,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    summary_interval: Duration,
) -> Result<(), RunError> {
    let (tx, rx) = queue::channel(settings.queue_max_bytes, metrics.clone());
    let control = SourceControl {
        stop: stop.clone(),
        drained: CancellationToken::new(),
    };
    let kind = source.kind();
    let source_task = tokio::spawn(source.run(tx, control.clone()));
    let summary = tokio::spawn(summarise(metrics.clone(), summary_interval, stop.clone()));
    let mut pipeline_task =
        tokio::spawn(pipeline::run(rx, sink, settings, rejects, metrics.clone()));
    tracing::info!(source = kind, "writer running");
    // The pipeline ends when the source drops its sender (stop, or failure).
    let drained = tokio::select! {
        joined = &mut pipeline_task => joined.map_err(|e| RunError::Task(e.to_string())),
        () = stop.cancelled() => match metrics.blocked() {
            Some(reason) => {
                // Nothing can be finished while Cosmos DB refuses every write.
                pipeline_task.abort();
                let _ = (&mut pipeline_task).await;
                Err(RunError::Held(reason))
            }
            None => {
                tracing::info!("shutting down: finishing in-flight writes");
                match tokio::time::timeout(DRAIN_TIMEOUT, &mut pipeline_task).await {
                    Ok(joined) => joined.map_err(|e| RunError::Task(e.to_string())),
                    Err(_) => {
                        pipeline_task.abort();
                        Err(RunError::DrainTimeout(DRAIN_TIMEOUT))
                    }
                }
            }
        },
    };
    control.drained.cancel();
    stop.cancel();
    let source_result = source_task
        .await
        .map_err(|e| RunError::Task(e.to_string()))?;
    let _ = summary.await;
    log_summary(&metrics, None);
    metrics.set_ready(false);
    drained?;
    source_result.map_err(RunError::from)
}

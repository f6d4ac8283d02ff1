//! The hand-off from the pipeline to a sink: the [`Sink`] contract the pipeline owns (so
//! that it knows nothing of Cosmos DB) and the [`PositionWrite`] it hands over, which
//! carries its message's acknowledgement until the write is final (and [`AgentWrite`]).

use std::future::Future;
use std::time::Instant;

use chrono::{DateTime, Utc};
use telemetry::Position;

use super::AgentWrite;
use crate::source::Ack;

/// Where the pipeline hands its positions: a contract the pipeline owns and a sink
/// implements, so that the pipeline knows nothing of Cosmos DB.
pub trait Sink {
    /// Takes the newest position of a drone in its batch, to write.
    fn write(&self, write: PositionWrite) -> impl Future<Output = ()> + Send;
    /// Takes a position that a newer one of its drone superseded within its batch.
    fn superseded(&self, write: PositionWrite) -> impl Future<Output = ()> + Send;
    /// Takes a fact of a drone's agent (connection state, version), to store.
    fn agent(&self, write: AgentWrite) -> impl Future<Output = ()> + Send;
    /// Nothing more comes: returns when every position taken is final.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// A fresh position on its way to the sink.
#[derive(Debug)]
pub struct PositionWrite {
    /// The position.
    pub position: Position,
    /// The hub's enqueued time, when known.
    pub enqueued: Option<DateTime<Utc>>,
    /// When the message was received.
    pub received_at: Instant,
    /// Acknowledges the message once the write is final.
    pub ack: Ack,
}

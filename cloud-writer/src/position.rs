//! A position on its way from the pipeline to the sink: the position, when it was received
//! and enqueued, and the acknowledgement of its message, released once its write is final.

use std::time::Instant;

use chrono::{DateTime, Utc};
use telemetry::Position;

use crate::source::Ack;

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

//! What is in flight in the sink, shared by the write engine and its outcome task
//! ([`super::engine`]) and the hold's side of it ([`super::parked`]): a position, an agent
//! fact or a track segment being written, the context of its bulk operation, the answer's
//! fields the state machine reads, and its parked form.

use std::time::Instant;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use cosmos::FinalError;
use telemetry::document::SegmentPoint;
use telemetry::{Position, PositionOrder};

use super::newest_wins::Step;
use super::segments::{Held, StretchKey};
use crate::metrics::DocumentKind;
use crate::pipeline::AgentWrite;

/// A position being written. Its document and patch are encoded when a step first
/// needs them, and kept for retries.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) position: Position,
    pub(super) doc_id: String,
    pub(super) order: PositionOrder,
    pub(super) enqueued: Option<DateTime<Utc>>,
    pub(super) received_at: Instant,
    pub(super) latest: Option<Bytes>,
    pub(super) patch: Option<Bytes>,
    /// The `ifMatch` of its Replace: kept, so that a Replace sent again stays conditional.
    pub(super) if_match: Option<String>,
    /// Whether it is the hold's probe (its next answer tells whether the cause is gone).
    pub(super) probe: bool,
    pub(super) ack: crate::source::Ack,
    pub(super) rounds: u32,
}

/// The context of one bulk operation.
#[derive(Debug)]
pub(super) enum Ctx {
    Latest(Box<Pending>, Step),
    Agent(Box<AgentPending>, Step),
    /// A track segment's Create or Replace ([`super::segment_write`]).
    Segment(Box<SegmentPending>, Step),
}

impl Ctx {
    /// The kind of document the operation writes (the label of its request units).
    pub(super) fn kind(&self) -> DocumentKind {
        match self {
            Ctx::Latest(..) => DocumentKind::Latest,
            Ctx::Agent(..) => DocumentKind::Agent,
            Ctx::Segment(..) => DocumentKind::History,
        }
    }
}

/// A held stretch being written into its track segment.
#[derive(Debug)]
pub(super) struct SegmentPending {
    pub(super) key: StretchKey,
    pub(super) held: Held,
    /// Read the stored segment before the next write (after a conflict).
    pub(super) read_first: bool,
    /// The points the write in flight stores (remembered when it is written), and how many
    /// of them are new (counted then).
    pub(super) sent: Vec<SegmentPoint>,
    pub(super) added: usize,
    /// Whether it is the hold's probe.
    pub(super) probe: bool,
    pub(super) rounds: u32,
}

/// An agent fact being written.
#[derive(Debug)]
pub(super) struct AgentPending {
    pub(super) write: AgentWrite,
    pub(super) doc_id: String,
    /// Whether it is the hold's probe.
    pub(super) probe: bool,
    pub(super) rounds: u32,
}

/// A write parked while the stream is held.
#[derive(Debug)]
pub(super) enum Parked {
    /// A position and the step to send again (`None`: read the stored document first).
    Latest(Box<Pending>, Option<Step>),
    /// An agent fact and the step to send again.
    Agent(Box<AgentPending>, Step),
    /// A track segment, written again from what is known stored (read first if flagged).
    Segment(Box<SegmentPending>),
}

/// The fields of an outcome the state machine reads.
pub(super) struct OutcomeInfo {
    pub(super) status: u16,
    pub(super) error: Option<FinalError>,
    pub(super) etag: Option<String>,
    pub(super) whole_request: bool,
}

//! Reading: the SDK's processor on the hub, its partitions' events turned into messages,
//! and what watches the readings.
//!
//! - [`processor`]: the processor's sessions, started again after a failure.
//! - [`partitions`]: one reading per claimed partition, its events into the queue and its
//!   checkpoints written on a timer.
//! - [`event`]: an event's body and properties as a message.
//! - [`lag`]: a session's monitor: how far each partition's checkpoint is behind the hub,
//!   and whether the hub answers.
//! - [`stall`]: a watchdog for readings that stop without an error.
//! - [`failure`]: which failures end a session, and how they are reported.

mod event;
mod failure;
mod lag;
mod partitions;
mod processor;
mod stall;

pub(super) use processor::run;

//! Positions published together (`PUBLISH_EVERY`): which buffered records wait for the
//! next message, when that message is due, and what one message of records looks like.
//!
//! Every sample is a record of the disk buffer as before; batching changes only how many
//! records one publish carries. A batch is due when it holds a publish interval's worth of
//! samples, when waiting for the next sample would hold its oldest longer than
//! `PUBLISH_EVERY`, or when the next sample might not fit in one IoT Hub message (4 KB,
//! [`BATCH_MAX_BYTES`]). Without batching a message is one record, exactly as a
//! version 1 reader expects; with it a message of several records is a version 2 batch
//! ([`telemetry::wire::batch`]), which only writers that read batches take.

use std::time::Duration;

use telemetry::wire::BatchBuilder;
use tokio::time::Instant;

use crate::buffer::Record;

/// The records waiting for the next batch of one agent.
#[derive(Debug)]
pub(crate) struct Batching {
    device_id: String,
    publish_every: Duration,
    report_interval: Duration,
    /// Samples per publish interval: a batch of this many is due.
    per_message: usize,
    held: Vec<Record>,
    /// When the oldest held record was taken.
    since: Option<Instant>,
}

impl Batching {
    /// Batching for an agent sampling every `report_interval` and publishing every
    /// `publish_every`; `None` when it publishes every sample.
    pub(crate) fn new(
        device_id: &str,
        report_interval: Duration,
        publish_every: Duration,
    ) -> Option<Batching> {
        (publish_every > report_interval).then(|| Batching {
            device_id: device_id.to_owned(),
            publish_every,
            report_interval,
            // Rounded intervals (30 s / 30 against 5 s / 30) still make whole samples.
            per_message: (publish_every.as_secs_f64() / report_interval.as_secs_f64() + 1e-6)
                .floor() as usize,
            held: Vec::new(),
            since: None,
        })
    }

    /// Holds `record`, taken at `now`, for the next batch.
    pub(crate) fn hold(&mut self, record: Record, now: Instant) {
        self.since.get_or_insert(now);
        self.held.push(record);
    }

    /// Whether the held records are to be published now.
    pub(crate) fn due(&self, now: Instant) -> bool {
        let Some(since) = self.since else {
            return false;
        };
        if self.held.len() >= self.per_message {
            return true;
        }
        // The next sample comes a report interval from now: too late for the oldest.
        if now + self.report_interval > since + self.publish_every {
            return true;
        }
        let longest = self.held.iter().map(|r| r.payload.len()).max();
        longest.is_some_and(|longest| builder(&self.device_id, &self.held).room() < longest)
    }

    /// Takes the held records (oldest first).
    pub(crate) fn take(&mut self) -> Vec<Record> {
        self.since = None;
        std::mem::take(&mut self.held)
    }

    /// The id of the oldest held record: the backlog ends before it.
    pub(crate) fn first_held(&self) -> Option<u64> {
        self.held.first().map(|r| r.id)
    }
}

/// The payload of one publish of `records` (at least one) of `device_id`: the record's own
/// message when alone, else a batch of them.
pub(crate) fn payload(device_id: &str, records: &[Record]) -> Vec<u8> {
    match records {
        [one] => one.payload.clone(),
        _ => builder(device_id, records).finish(),
    }
}

/// Whether a batch of `records` has room for `next`.
pub(crate) fn fits(device_id: &str, records: &[Record], next: &Record) -> bool {
    builder(device_id, records).fits(&next.payload)
}

/// A batch of `records`.
fn builder(device_id: &str, records: &[Record]) -> BatchBuilder {
    let mut batch = BatchBuilder::new(device_id);
    for record in records {
        batch.push(&record.payload);
    }
    batch
}

//! The per-position state machine of the newest-wins write, without I/O: how a position's
//! write starts from what the high-water mark knows of its drone ([`first`]), what follows
//! an answer of the server ([`next`]) or the ETag mode's read ([`after_read`]), and how a
//! position ends ([`Final`]). The write engine (`engine.rs`) sends the operations and
//! feeds the answers in; refusals that are not this machine's business are classified
//! before (`super::refusal`).

use cosmos::OperationType;
use telemetry::PositionOrder;

use super::high_water::Mark;
use crate::config::NewestWins;
use crate::metrics::DropReason;

/// Rounds of Patch/Create (or Read/Replace/Create) a position may take before it is
/// counted as failed. A conflict (409, 412) means another write of the same drone
/// succeeded meanwhile, so a position loses at most once to each other position of its
/// drone in flight (an ETag-mode conflict costs two rounds: the conflict and the read);
/// the bound sits well above that, so only a server that keeps contradicting itself
/// gets there.
pub(super) const MAX_ROUNDS: u32 = 64;

/// How the write of a position not known superseded starts, from what the high-water
/// mark knows of its drone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum First {
    /// A drone this process has not written: Create (409, the document exists: go on as
    /// for a known drone), which saves the Patch answered 404 of a new document.
    Create,
    /// Patch mode, a known drone: the conditional Patch.
    Patch,
    /// ETag mode with the ETag this writer last wrote: Replace with `ifMatch`.
    Replace(String),
    /// ETag mode without an ETag: read the stored document first.
    Read,
}

/// Which operation of a position's write an outcome belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Patch,
    Create,
    Replace,
}

impl Step {
    /// The bulk operation type of the step.
    pub(super) fn kind(self) -> OperationType {
        match self {
            Step::Patch => OperationType::Patch,
            Step::Create => OperationType::Create,
            Step::Replace => OperationType::Replace,
        }
    }
}

/// How a position ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Final {
    Written,
    Superseded,
    /// Turned stale while retried or parked.
    StaleInRetry,
    /// Refused by the server for this document alone (the drop reason).
    Refused(DropReason),
    Failed,
}

/// What follows an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// The position is final.
    Finish(Final),
    /// Send this step.
    Send(Step),
    /// ETag mode after a conflict: forget the ETag and read the stored document again.
    Read,
    /// An answer the machine does not expect: the position fails (logged, counted).
    Unexpected,
}

/// What follows the ETag mode's read of the stored document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterRead {
    /// No document: Create.
    Create,
    /// A document with an older position: Replace with its ETag.
    Replace,
    /// A document with this position or a newer one: final.
    Superseded,
}

/// How the write of a position of `order` starts, given its drone's high-water `mark`;
/// `None` when the mark shows it superseded.
pub(super) fn first(mark: Option<&Mark>, order: PositionOrder, mode: NewestWins) -> Option<First> {
    match mark {
        // Not written by this process (or forgotten): most likely a new document.
        None => Some(First::Create),
        Some(mark) if order <= mark.order => None,
        Some(mark) => Some(match (mode, &mark.etag) {
            (NewestWins::Patch, _) => First::Patch,
            (NewestWins::Etag, Some(etag)) => First::Replace(etag.clone()),
            (NewestWins::Etag, None) => First::Read,
        }),
    }
}

/// Counts one more round; `false` when the position has taken all of [`MAX_ROUNDS`].
pub(super) fn take_round(rounds: &mut u32) -> bool {
    *rounds += 1;
    *rounds <= MAX_ROUNDS
}

/// What follows the answer `status` to `step` (an answer that is no refusal), `rounds`
/// taken so far (a conflict takes one).
pub(super) fn next(step: Step, status: u16, mode: NewestWins, rounds: &mut u32) -> Next {
    match (step, status) {
        (Step::Patch | Step::Replace, 200) | (Step::Create, 201) => Next::Finish(Final::Written),
        (Step::Patch, 412) => Next::Finish(Final::Superseded),
        (Step::Patch | Step::Replace, 404) => Next::Send(Step::Create),
        (Step::Replace, 412) | (Step::Create, 409) => {
            if !take_round(rounds) {
                Next::Finish(Final::Failed)
            } else if mode == NewestWins::Etag {
                Next::Read
            } else {
                Next::Send(Step::Patch)
            }
        }
        _ => Next::Unexpected,
    }
}

/// ETag mode: what follows reading the stored order (`None`: no document) for a position
/// of `order`.
pub(super) fn after_read(stored: Option<PositionOrder>, order: PositionOrder) -> AfterRead {
    match stored {
        None => AfterRead::Create,
        Some(stored) if order <= stored => AfterRead::Superseded,
        Some(_) => AfterRead::Replace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(device_time_ms: i64, seq: u64) -> PositionOrder {
        PositionOrder {
            device_time_ms,
            seq,
        }
    }

    fn mark(o: PositionOrder, etag: Option<&str>) -> Mark {
        Mark {
            order: o,
            etag: etag.map(str::to_owned),
        }
    }

    #[test]
    fn a_write_starts_from_the_high_water_mark() {
        let o = order(2_000, 2);
        assert_eq!(first(None, o, NewestWins::Patch), Some(First::Create));
        assert_eq!(first(None, o, NewestWins::Etag), Some(First::Create));
        let newer = mark(order(3_000, 1), Some("e"));
        assert_eq!(first(Some(&newer), o, NewestWins::Patch), None);
        let same = mark(o, None);
        assert_eq!(first(Some(&same), o, NewestWins::Etag), None);
        let older = mark(order(1_000, 9), Some("e1"));
        assert_eq!(
            first(Some(&older), o, NewestWins::Patch),
            Some(First::Patch)
        );
        assert_eq!(
            first(Some(&older), o, NewestWins::Etag),
            Some(First::Replace("e1".into()))
        );
        let no_etag = mark(order(1_000, 9), None);
        assert_eq!(
            first(Some(&no_etag), o, NewestWins::Etag),
            Some(First::Read)
        );
    }

    #[test]
    fn answers_lead_to_the_next_step() {
        let mut rounds = 0;
        let patch = NewestWins::Patch;
        assert_eq!(
            next(Step::Patch, 200, patch, &mut rounds),
            Next::Finish(Final::Written)
        );
        assert_eq!(
            next(Step::Create, 201, patch, &mut rounds),
            Next::Finish(Final::Written)
        );
        assert_eq!(
            next(Step::Patch, 412, patch, &mut rounds),
            Next::Finish(Final::Superseded)
        );
        assert_eq!(
            next(Step::Patch, 404, patch, &mut rounds),
            Next::Send(Step::Create)
        );
        assert_eq!(
            next(Step::Replace, 404, NewestWins::Etag, &mut rounds),
            Next::Send(Step::Create)
        );
        assert_eq!(rounds, 0, "only conflicts take rounds");
        assert_eq!(
            next(Step::Create, 409, patch, &mut rounds),
            Next::Send(Step::Patch)
        );
        assert_eq!(
            next(Step::Create, 409, NewestWins::Etag, &mut rounds),
            Next::Read
        );
        assert_eq!(
            next(Step::Replace, 412, NewestWins::Etag, &mut rounds),
            Next::Read
        );
        assert_eq!(rounds, 3);
        assert_eq!(
            next(Step::Create, 200, patch, &mut rounds),
            Next::Unexpected
        );
    }

    #[test]
    fn a_server_that_keeps_contradicting_itself_fails_the_position() {
        let mut rounds = 0;
        for _ in 0..MAX_ROUNDS {
            assert_eq!(
                next(Step::Create, 409, NewestWins::Patch, &mut rounds),
                Next::Send(Step::Patch)
            );
        }
        assert_eq!(
            next(Step::Create, 409, NewestWins::Patch, &mut rounds),
            Next::Finish(Final::Failed)
        );
    }

    #[test]
    fn a_read_decides_between_create_replace_and_superseded() {
        let o = order(2_000, 2);
        assert_eq!(after_read(None, o), AfterRead::Create);
        assert_eq!(after_read(Some(order(1_000, 5)), o), AfterRead::Replace);
        assert_eq!(after_read(Some(o), o), AfterRead::Superseded);
        assert_eq!(after_read(Some(order(2_000, 3)), o), AfterRead::Superseded);
    }
}

//! What a refusal by Cosmos DB means for the writer, decided from the answer alone (no I/O):
//! the newest-wins state machine's business (a write, a missing document, a conflict, a
//! failed condition), a refusal of one document (the message's own fault: dead-lettered,
//! acknowledged and counted), or a refusal that would hit every write (authorization, a
//! missing container, an operation the server does not support, an outage), which holds
//! the stream until it goes away. The hold itself is [`super::hold`].

use cosmos::{CosmosError, FinalError, OperationType};

use crate::metrics::{DropReason, HoldReason};

/// What an answer means for the position whose operation it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No refusal to handle here: the state machine reads the status (2xx, 404 of a
    /// document, 409, 412).
    None,
    /// Throttled until the retry budget ran out: submit again.
    Again,
    /// This document is refused: the drop reason (dead-lettered, acknowledged).
    Document(DropReason),
    /// Every write would be refused: hold the stream.
    Hold(HoldReason),
}

/// Classifies the final outcome of a bulk operation of type `kind`.
pub fn of_outcome(
    kind: OperationType,
    status: u16,
    error: Option<&FinalError>,
    whole_request: bool,
) -> Refusal {
    match error {
        None => Refusal::None,
        Some(FinalError::Invalid(_)) => Refusal::Document(DropReason::DocumentMalformed),
        Some(FinalError::RetriesExhausted { .. }) if status == 429 => Refusal::Again,
        Some(FinalError::RetriesExhausted { .. } | FinalError::Request(_)) => {
            Refusal::Hold(HoldReason::Unavailable)
        }
        Some(FinalError::Ranges(_)) => {
            of_status(status, true).unwrap_or(Refusal::Hold(HoldReason::Unavailable))
        }
        Some(FinalError::Rejected) => match (status, whole_request, kind) {
            (400, true, OperationType::Patch) => Refusal::Hold(HoldReason::PatchUnsupported),
            // A Create never meets a missing document: its 404 is the container's.
            (404, false, OperationType::Create) => Refusal::Hold(HoldReason::ContainerMissing),
            (404 | 409 | 412, false, _) => Refusal::None,
            _ => of_status(status, whole_request).unwrap_or(Refusal::None),
        },
    }
}

/// Classifies the error of a request made outside the bulk writer (the ETag mode's reads,
/// a track segment's read after a conflict).
pub fn of_error(error: &CosmosError) -> Refusal {
    match error {
        CosmosError::Service(e) => {
            of_status(e.status, true).unwrap_or(Refusal::Hold(HoldReason::RequestRefused))
        }
        CosmosError::Credential(_) => Refusal::Hold(HoldReason::Unauthorized),
        // A document id no URL can address (`.`, `..`): that document, not the service.
        CosmosError::InvalidName(_) => Refusal::Document(DropReason::DocumentRefused),
        CosmosError::Timeout(_)
        | CosmosError::Transport(_)
        | CosmosError::Decode { .. }
        | CosmosError::Protocol(_)
        | CosmosError::Config(_) => Refusal::Hold(HoldReason::Unavailable),
    }
}

/// The refusals a status means whoever it answered; `None` for a status the state machine
/// handles.
fn of_status(status: u16, whole_request: bool) -> Option<Refusal> {
    Some(match status {
        401 | 403 => Refusal::Hold(HoldReason::Unauthorized),
        404 if whole_request => Refusal::Hold(HoldReason::ContainerMissing),
        429 => Refusal::Again,
        413 => Refusal::Document(DropReason::DocumentTooLarge),
        0 | 408 | 449 | 500..=599 => Refusal::Hold(HoldReason::Unavailable),
        400..=499 if whole_request => Refusal::Hold(HoldReason::RequestRefused),
        400..=499 if !matches!(status, 404 | 409 | 412) => {
            Refusal::Document(DropReason::DocumentRefused)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use HoldReason::{
        ContainerMissing, PatchUnsupported, RequestRefused, Unauthorized, Unavailable,
    };
    use OperationType::{Create, Patch, Replace};

    fn rejected(kind: OperationType, status: u16, whole: bool) -> Refusal {
        of_outcome(kind, status, Some(&FinalError::Rejected), whole)
    }

    #[test]
    fn answers_of_the_state_machine_are_not_refusals() {
        assert_eq!(of_outcome(Patch, 200, None, false), Refusal::None);
        assert_eq!(rejected(Patch, 412, false), Refusal::None);
        assert_eq!(rejected(Patch, 404, false), Refusal::None);
        assert_eq!(rejected(Replace, 404, false), Refusal::None);
        assert_eq!(rejected(Create, 409, false), Refusal::None);
    }

    #[test]
    fn refusals_that_hit_every_write_hold_the_stream() {
        let hold = |c| Refusal::Hold(c);
        assert_eq!(rejected(Create, 401, true), hold(Unauthorized));
        assert_eq!(rejected(Patch, 403, false), hold(Unauthorized));
        assert_eq!(rejected(Replace, 404, true), hold(ContainerMissing));
        assert_eq!(rejected(Create, 404, false), hold(ContainerMissing));
        assert_eq!(rejected(Patch, 400, true), hold(PatchUnsupported));
        assert_eq!(rejected(Create, 400, true), hold(RequestRefused));
        assert_eq!(rejected(Create, 501, false), hold(Unavailable));
        let exhausted = FinalError::RetriesExhausted {
            attempts: 10,
            last: "status 503".into(),
        };
        assert_eq!(
            of_outcome(Create, 503, Some(&exhausted), false),
            hold(Unavailable)
        );
        assert_eq!(
            of_outcome(
                Create,
                0,
                Some(&FinalError::Request("refused".into())),
                true
            ),
            hold(Unavailable)
        );
        let ranges = FinalError::Ranges("404".into());
        assert_eq!(
            of_outcome(Create, 404, Some(&ranges), true),
            hold(ContainerMissing)
        );
        assert_eq!(
            of_outcome(Create, 0, Some(&ranges), true),
            hold(Unavailable)
        );
        assert_eq!(
            of_outcome(Create, 429, Some(&exhausted), false),
            Refusal::Again
        );
    }

    #[test]
    fn refusals_of_one_document_are_the_documents_own() {
        assert_eq!(
            rejected(Create, 413, false),
            Refusal::Document(DropReason::DocumentTooLarge)
        );
        assert_eq!(
            rejected(Replace, 400, false),
            Refusal::Document(DropReason::DocumentRefused)
        );
        assert_eq!(
            of_outcome(Patch, 400, Some(&FinalError::Invalid("json".into())), true),
            Refusal::Document(DropReason::DocumentMalformed)
        );
    }

    #[test]
    fn read_errors_are_classified_by_status() {
        let service = |status| {
            CosmosError::Service(cosmos::ServiceError {
                status,
                substatus: 0,
                activity_id: None,
                request_charge: 0.0,
                retry_after: None,
                message: String::new(),
            })
        };
        assert_eq!(of_error(&service(401)), Refusal::Hold(Unauthorized));
        assert_eq!(of_error(&service(404)), Refusal::Hold(ContainerMissing));
        assert_eq!(of_error(&service(503)), Refusal::Hold(Unavailable));
        assert_eq!(of_error(&service(429)), Refusal::Again);
        assert_eq!(
            of_error(&CosmosError::Timeout(std::time::Duration::from_secs(1))),
            Refusal::Hold(Unavailable)
        );
        // A device id no URL can address drops its document, not the whole sink.
        assert_eq!(
            of_error(&CosmosError::InvalidName("/docs/..".into())),
            Refusal::Document(DropReason::DocumentRefused)
        );
    }
}

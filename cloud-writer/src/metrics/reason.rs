//! The names of the writer's outcomes, each set defined once: why a message is not written
//! ([`DropReason`]), why the writer holds the stream ([`HoldReason`]), which document a
//! write stored ([`DocumentKind`]), how this replica's ownership of an Event Hubs partition
//! changed ([`OwnershipChange`]), why the Event Hubs source's connection or a partition's
//! receiver broke ([`SessionBreak`]), and why a message is invalid ([`InvalidLabel`] over
//! telemetry's [`InvalidReason`]). Each value carries its label as the metrics, the logs,
//! the dead-letter file and the reports spell it, so a misspelt reason does not compile.

use std::fmt;
use std::str::FromStr;

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use telemetry::wire::InvalidReason;

/// Declares a label enum: its variants with their label values, `ALL` (every value, in
/// declaration order: what the metrics pre-register at zero), `as_str`, `Display` and
/// prometheus-client's `EncodeLabelValue`.
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident => $label:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; [$($label),+].len()] = [$($name::$variant),+];

            /// The label value, as the metrics, logs and reports spell it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $label, )+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
                fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
}

label_values! {
    /// Why a message is not written (`messages_dropped_total{reason}`; a history document's
    /// under `history_dropped_total{reason}`).
    pub enum DropReason {
        /// Older than the staleness cutoff when it arrived.
        Stale => "stale",
        /// Not a valid position (`messages_invalid_total{reason}` says why).
        Invalid => "invalid",
        /// The payload's `deviceId` differs from the identity the transport authenticated.
        Spoofed => "spoofed",
        /// Its device time lies too far ahead of now.
        FromFuture => "from_future",
        /// A newer position of the same drone is stored or on its way.
        Superseded => "superseded",
        /// Cosmos DB kept answering conflicts past the round limit.
        WriteFailed => "write_failed",
        /// No device identity to key it by.
        Unroutable => "unroutable",
        /// Turned stale while its write was being retried or held.
        StaleInRetry => "stale_in_retry",
        /// Cosmos DB refused the document as too large (dead-lettered).
        DocumentTooLarge => "document_too_large",
        /// Cosmos DB could not read the document (dead-lettered).
        DocumentMalformed => "document_malformed",
        /// Cosmos DB refused the document for another reason (dead-lettered).
        DocumentRefused => "document_refused",
        /// An event IoT Hub routed that the writer does not store: another message
        /// source, a module's event, or an agent fact while writing in ETag mode
        /// (dead-lettered).
        UnsupportedEvent => "unsupported_event",
        /// A connection state or twin change event off the documented schema (dead-lettered).
        InvalidEvent => "invalid_event",
    }
}

label_values! {
    /// Why the writer holds the stream: every write would be refused
    /// (`writer_blocked{reason}`, `writer_holds_total{reason}`).
    pub enum HoldReason {
        /// 401/403: the key is wrong, rotated, or lacks the permission.
        Unauthorized => "unauthorized",
        /// 404 for the request: the database or container does not exist.
        ContainerMissing => "container_missing",
        /// A batch with Patch refused as a whole: the server has no Patch in batches.
        PatchUnsupported => "patch_unsupported",
        /// Another refusal of the whole request (400 and the like without a malformed body).
        RequestRefused => "request_refused",
        /// No answer, 5xx, or transient failures until the retry budget ran out.
        Unavailable => "unavailable",
    }
}

label_values! {
    /// The document a write stored (`documents_written_total{kind}`).
    pub enum DocumentKind {
        /// The drone's latest-position document.
        Latest => "latest",
        /// A position stored in its drone's track segment.
        History => "history",
        /// A drone's agent facts (connection state, version) on its latest document.
        Agent => "agent",
    }
}

label_values! {
    /// A change of this replica's ownership of an Event Hubs partition
    /// (`eventhubs_ownership_changes_total{change}`).
    pub enum OwnershipChange {
        /// It started reading the partition.
        Claimed => "claimed",
        /// It stopped reading the partition without giving it up: another replica took it
        /// over, or the receiver or the processor failed.
        Lost => "lost",
        /// It gave the partition up at a graceful stop.
        Released => "released",
    }
}

label_values! {
    /// Why the Event Hubs source rebuilt its connection, or a partition's receiver ended
    /// without another owner taking the partition (`eventhubs_session_breaks_total{cause}`).
    pub enum SessionBreak {
        /// The connection to the hub could not be opened.
        Connect => "connect",
        /// The hub did not answer a management request.
        HubSilent => "hub_silent",
        /// The SDK's processor could not start.
        ProcessorStart => "processor_start",
        /// The partition readers' thread could not start.
        ReadersStart => "readers_start",
        /// The partitions' receivers could not attach on the AMQP session (it broke).
        ReceiversCannotAttach => "receivers_cannot_attach",
        /// The SDK's processor failed or stopped.
        ProcessorFailed => "processor_failed",
        /// The partition readers stopped.
        ReadersStopped => "readers_stopped",
        /// A partition's receiver failed or closed (its link or session broke); the
        /// partition is read again from its checkpoint.
        ReceiverFailed => "receiver_failed",
        /// Partitions' receivers delivered nothing while the hub held newer events
        /// (`source::eventhubs::reading::stall`).
        ReceiversStalled => "receivers_stalled",
    }
}

impl SessionBreak {
    /// What broke, as the logs say it.
    pub fn describe(self) -> &'static str {
        match self {
            SessionBreak::Connect => "cannot connect to the hub",
            SessionBreak::HubSilent => "the hub does not answer",
            SessionBreak::ProcessorStart => "cannot start the processor",
            SessionBreak::ReadersStart => "cannot start the partition readers",
            SessionBreak::ReceiversCannotAttach => {
                "the partition receivers cannot attach on the AMQP session"
            }
            SessionBreak::ProcessorFailed => "the processor failed",
            SessionBreak::ReadersStopped => "the partition readers stopped",
            SessionBreak::ReceiverFailed => "a partition's receiver failed",
            SessionBreak::ReceiversStalled => {
                "the partition receivers stalled: the hub holds events they do not deliver"
            }
        }
    }
}

/// Telemetry's [`InvalidReason`] as the label of `messages_invalid_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct InvalidLabel(pub(super) InvalidReason);

impl EncodeLabelValue for InvalidLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        fmt::Write::write_str(encoder, self.0.as_str())
    }
}

impl HoldReason {
    /// What fixes it, for the log line.
    pub fn remedy(self) -> &'static str {
        match self {
            HoldReason::Unauthorized => {
                "Cosmos DB refuses the writer's credential (401/403). With COSMOS_AUTH=key: put the account's current key into the file named by COSMOS_KEY_FILE (read again on every refusal), or restart with the right COSMOS_KEY. With COSMOS_AUTH=entra: give the writer's identity the role \"Cosmos DB Built-in Data Contributor\" on the account (az cosmosdb sql role assignment create) and check its tenant; a new token is asked for before every probe"
            }
            HoldReason::ContainerMissing => {
                "the database or container (COSMOS_DATABASE, COSMOS_CONTAINER) does not exist: create it again (partition key as COSMOS_PARTITION_KEY_PATH); writing resumes by itself"
            }
            HoldReason::PatchUnsupported => {
                "the server refuses Patch in batches: set NEWEST_WINS=etag"
            }
            HoldReason::RequestRefused => {
                "Cosmos DB refuses the batch requests as a whole: check COSMOS_ENDPOINT points at a Cosmos DB (NoSQL API) account and the server's log"
            }
            HoldReason::Unavailable => {
                "Cosmos DB does not answer, or fails (5xx, timeouts, connections refused): check COSMOS_ENDPOINT, the network and the service's health"
            }
        }
    }
}

/// A label value that names no [`DropReason`] (read from another writer's metrics).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a drop reason")]
pub struct UnknownDropReason(pub String);

impl FromStr for DropReason {
    type Err = UnknownDropReason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DropReason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownDropReason(s.to_owned()))
    }
}

/// As its label: the dead-letter file's `reason` and the demo's JSON report keys.
impl serde::Serialize for DropReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_snake_case_and_parse_back() {
        let mut seen = std::collections::BTreeSet::new();
        let labels = DropReason::ALL.map(DropReason::as_str).into_iter();
        let labels = labels.chain(HoldReason::ALL.map(HoldReason::as_str));
        let labels = labels.chain(DocumentKind::ALL.map(DocumentKind::as_str));
        let labels = labels.chain(OwnershipChange::ALL.map(OwnershipChange::as_str));
        for label in labels.chain(SessionBreak::ALL.map(SessionBreak::as_str)) {
            assert!(seen.insert(label), "{label} twice");
            assert!(
                label.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{label}"
            );
        }
        for reason in DropReason::ALL {
            assert_eq!(reason.as_str().parse(), Ok(reason));
        }
        assert_eq!(
            "stael".parse::<DropReason>(),
            Err(UnknownDropReason("stael".into()))
        );
    }
}

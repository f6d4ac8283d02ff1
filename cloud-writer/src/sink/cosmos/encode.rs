//! The bytes a position turns into: the latest-position document, the conditional patch
//! that applies it only over an older stored position, and the history document.
//!
//! All three are written by `telemetry::document` straight from the position. The patch
//! `set`s every field that can change between positions
//! ([`telemetry::document::PATCHED_FIELDS`], exactly Cosmos DB's limit of
//! 10 operations in one patch); an optional field the new position lacks (`altM`,
//! `headingDeg`, `speedMps`, `batteryPct`, the enqueued time) is set to `null`, so a
//! newer position never leaves an older position's value behind. (`remove` is not used:
//! Cosmos DB answers 400 when the path is absent.)
//!
//! Each is encoded when an operation needs it: a known drone's write needs only the
//! patch, a new drone's only the document.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use cosmos::PartitionKey;
use telemetry::{DocumentLayout, Position};

/// Encodes positions for one container layout.
#[derive(Debug, Clone)]
pub struct Encoder {
    layout: DocumentLayout,
    with_patch: bool,
    history: Option<Option<u32>>,
    /// Every document goes under the undefined partition key.
    undefined_key: bool,
}

impl Encoder {
    /// An encoder for `layout`; `with_patch` adds the conditional patch; `history`
    /// (`Some(ttl)`) adds the history document.
    pub fn new(layout: DocumentLayout, with_patch: bool, history: Option<Option<u32>>) -> Self {
        Encoder {
            layout,
            with_patch,
            history,
            undefined_key: false,
        }
    }

    /// Sends every document under the undefined partition key (`[{}]`) instead of its
    /// device id: for a container partitioned on a path the documents lack (a writer forced
    /// past its startup guard), which is where Cosmos DB files such documents.
    pub fn with_undefined_partition_key(mut self) -> Self {
        self.undefined_key = true;
        self
    }

    /// The partition key of a drone's documents: its device id, or the undefined key.
    pub fn partition_key(&self, device_id: &str) -> PartitionKey {
        if self.undefined_key {
            PartitionKey::Undefined
        } else {
            PartitionKey::from(device_id)
        }
    }

    /// The document layout.
    pub fn layout(&self) -> &DocumentLayout {
        &self.layout
    }

    /// The history document of a position, in history mode.
    pub fn history_document(
        &self,
        pos: &Position,
        enqueued: Option<DateTime<Utc>>,
    ) -> Option<Bytes> {
        // The writers reserve their bound at once: one allocation, no growth.
        self.history.map(|ttl| {
            let mut out = Vec::new();
            self.layout.write_history(pos, enqueued, ttl, &mut out);
            Bytes::from(out)
        })
    }

    /// The latest-position document of a valid position.
    pub fn latest(&self, pos: &Position, enqueued: Option<DateTime<Utc>>) -> Bytes {
        let mut out = Vec::new();
        self.layout.write_latest(pos, enqueued, &mut out);
        Bytes::from(out)
    }

    /// The conditional patch of a valid position, in patch mode.
    pub fn patch(&self, pos: &Position, enqueued: Option<DateTime<Utc>>) -> Option<Bytes> {
        self.with_patch.then(|| {
            let mut out = Vec::new();
            self.layout.write_patch(pos, enqueued, &mut out);
            Bytes::from(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use telemetry::document::{DOCUMENT_FIELDS, PATCHED_FIELDS};

    use super::*;

    /// Cosmos DB's limit of operations in one patch request.
    const MAX_PATCH_OPERATIONS: usize = 10;

    fn position() -> Position {
        telemetry::wire::decode(
            br#"{"v":1,"deviceId":"drone-7","seq":9,"ts":"2026-11-22T09:15:02.500Z","lat":47.5,"lon":-122.25,"altM":100.0}"#,
        )
        .unwrap()
    }

    #[test]
    fn patch_fits_the_service_limit() {
        assert_eq!(PATCHED_FIELDS.len(), MAX_PATCH_OPERATIONS);
        for field in PATCHED_FIELDS {
            assert!(DOCUMENT_FIELDS.contains(&field));
        }
    }

    #[test]
    fn patch_sets_every_changing_field_absent_ones_to_null() {
        let encoder = Encoder::new(DocumentLayout::default(), true, None);
        let bytes = encoder.patch(&position(), None).unwrap();
        let patch: Value = serde_json::from_slice(&bytes).unwrap();
        let ops = patch["operations"].as_array().unwrap();
        let value_of = |path: &str| {
            ops.iter()
                .find(|op| op["path"] == path)
                .map(|op| op["value"].clone())
        };
        assert_eq!(value_of("/seq"), Some(json!(9)));
        assert_eq!(
            value_of("/location"),
            Some(json!({"type":"Point","coordinates":[-122.25,47.5]}))
        );
        assert_eq!(value_of("/altM"), Some(json!(100.0)));
        assert_eq!(value_of("/speedMps"), Some(Value::Null));
        assert_eq!(value_of("/enqueuedTimeMs"), Some(Value::Null));
        assert_eq!(ops.len(), MAX_PATCH_OPERATIONS);
        assert!(ops.iter().all(|op| op["op"] == "set"));
        assert_eq!(
            patch["condition"],
            "FROM c WHERE c.deviceTimeMs < 1795338902500 OR (c.deviceTimeMs = 1795338902500 AND c.seq < 9)"
        );
        // The patch parses as the wire type the local endpoint reads, nulls kept.
        let parsed: cosmos::PatchRequest = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(parsed.operations.len(), ops.len());
        assert!(parsed.operations.iter().all(|op| op.value.is_some()));
        assert!(encoder.history_document(&position(), None).is_none());
    }

    #[test]
    fn history_document_has_its_own_id_and_ttl() {
        let encoder = Encoder::new(DocumentLayout::default(), false, Some(Some(3600)));
        assert!(encoder.patch(&position(), None).is_none());
        let history = encoder.history_document(&position(), None).unwrap();
        let history: Value = serde_json::from_slice(&history).unwrap();
        assert_eq!(history["id"], "drone-7:9");
        assert_eq!(history["ttl"], 3600);
        let latest: Value = serde_json::from_slice(&encoder.latest(&position(), None)).unwrap();
        assert_eq!(latest, DocumentLayout::default().latest(&position(), None));
    }
}

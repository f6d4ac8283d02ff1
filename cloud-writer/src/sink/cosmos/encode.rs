//! The bytes a position turns into: the latest-position document, the conditional patch
//! that applies it only over an older stored position, and the track segment of a stretch
//! of positions (history).
//!
//! All are written by `telemetry::document` straight from the position. The patch
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
use telemetry::document::SegmentPoint;
use telemetry::{DocumentLayout, Position};

/// How history is kept: track segments of `span`, with `ttl` (seconds) when given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryFormat {
    /// The stretch of device time one segment holds (`HISTORY_SEGMENT_SPAN`).
    pub span: std::time::Duration,
    /// `ttl` of the segments (`HISTORY_TTL`), in seconds.
    pub ttl: Option<u32>,
}

/// Encodes positions for one container layout.
#[derive(Debug, Clone)]
pub struct Encoder {
    layout: DocumentLayout,
    with_patch: bool,
    history: Option<HistoryFormat>,
    /// Every document goes under the undefined partition key.
    undefined_key: bool,
}

impl Encoder {
    /// An encoder for `layout`; `with_patch` adds the conditional patch; `history` adds
    /// track segments.
    pub fn new(layout: DocumentLayout, with_patch: bool, history: Option<HistoryFormat>) -> Self {
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

    /// How history is kept; `None` when it is not.
    pub fn history(&self) -> Option<HistoryFormat> {
        self.history
    }

    /// The track segment of `device_id` over `stretch` holding `points` (sorted by `seq`,
    /// unique), with the history's `ttl`.
    pub fn segment(&self, device_id: &str, stretch: (i64, i64), points: &[SegmentPoint]) -> Bytes {
        let ttl = self.history.and_then(|h| h.ttl);
        let mut out = Vec::new();
        self.layout
            .write_segment(device_id, stretch, points, ttl, &mut out);
        Bytes::from(out)
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
            "FROM c WHERE NOT IS_DEFINED(c.deviceTimeMs) OR c.deviceTimeMs < 1795338902500 OR (c.deviceTimeMs = 1795338902500 AND c.seq < 9)"
        );
        // The patch parses as the wire type the local endpoint reads, nulls kept.
        let parsed: cosmos::PatchRequest = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(parsed.operations.len(), ops.len());
        assert!(parsed.operations.iter().all(|op| op.value.is_some()));
        assert!(encoder.history().is_none());
    }

    #[test]
    fn segments_carry_the_history_ttl() {
        let format = HistoryFormat {
            span: std::time::Duration::from_secs(300),
            ttl: Some(3600),
        };
        let encoder = Encoder::new(DocumentLayout::default(), false, Some(format));
        assert!(encoder.patch(&position(), None).is_none());
        let point = SegmentPoint::from(&position());
        let segment = encoder.segment("drone-7", (1_795_338_900_000, 1_795_339_200_000), &[point]);
        let segment: Value = serde_json::from_slice(&segment).unwrap();
        assert_eq!(segment["id"], "drone-7:seg:1795338900000");
        assert_eq!(segment["ttl"], 3600);
        assert_eq!(
            segment["points"],
            json!([[9, 1795338902500_i64, -122.25, 47.5, 100.0]])
        );
    }
}

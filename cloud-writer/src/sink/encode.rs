//! The bytes a position turns into: the latest-position document, the conditional patch
//! that applies it only over an older stored position, and the history document.
//!
//! The patch is derived from the document itself (every field of the document that can
//! change between positions is `set`), so the document format stays defined in one place
//! (`telemetry::document`). Cosmos DB allows at most [`MAX_PATCH_OPERATIONS`] operations
//! per patch; the fields that can change are exactly that many.
//!
//! An optional field the new position lacks (`altM`, `headingDeg`, `speedMps`,
//! `batteryPct`, the enqueued time) is left out of the patch, so the stored document keeps
//! the value of an earlier position for it: a `set` to `null` is not accepted by every
//! server, and a `remove` fails when the field is absent. Drones send the same fields in
//! every message, so this only shows when a drone stops reporting a field.

use std::borrow::Cow;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
use telemetry::document::DOCUMENT_FIELDS;
use telemetry::{DocumentLayout, Position};

/// Cosmos DB's limit of operations in one patch request.
pub const MAX_PATCH_OPERATIONS: usize = 10;

/// Document fields that never change for a drone's latest document (or are not part of it):
/// they are written by the Create and left alone by the patch.
const FIXED_FIELDS: [&str; 5] = ["id", "deviceId", "kind", "schemaVersion", "ttl"];

/// The fields a patch sets, in document order.
pub fn patched_fields() -> impl Iterator<Item = &'static str> {
    DOCUMENT_FIELDS
        .iter()
        .copied()
        .filter(|f| !FIXED_FIELDS.contains(f))
}

/// The encoded forms of one position.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The latest-position document.
    pub latest: Bytes,
    /// The conditional patch (patch mode).
    pub patch: Option<Bytes>,
    /// The history document (history mode).
    pub history: Option<Bytes>,
}

/// Encodes positions for one container layout.
#[derive(Debug, Clone)]
pub struct Encoder {
    layout: DocumentLayout,
    with_patch: bool,
    history: Option<Option<u32>>,
}

impl Encoder {
    /// An encoder for `layout`; `with_patch` adds the conditional patch; `history`
    /// (`Some(ttl)`) adds the history document.
    pub fn new(layout: DocumentLayout, with_patch: bool, history: Option<Option<u32>>) -> Self {
        Encoder {
            layout,
            with_patch,
            history,
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
        self.history.map(|ttl| {
            let mut out = Vec::with_capacity(384);
            self.layout.write_history(pos, enqueued, ttl, &mut out);
            Bytes::from(out)
        })
    }

    /// Encodes one valid position.
    pub fn encode(&self, pos: &Position, enqueued: Option<DateTime<Utc>>) -> Encoded {
        let mut latest = Vec::with_capacity(384);
        self.layout.write_latest(pos, enqueued, &mut latest);
        let patch = self.with_patch.then(|| {
            let condition = pos.order().stored_is_older_condition();
            Bytes::from(patch_of_document(&latest, &condition))
        });
        let history = self.history_document(pos, enqueued);
        Encoded {
            latest: Bytes::from(latest),
            patch,
            history,
        }
    }
}

/// The top-level fields of a JSON object, in order, values unparsed. A document has
/// about fifteen, so a linear search beats hashing.
struct TopLevel<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for TopLevel<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = TopLevel<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(16);
                while let Some(entry) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    fields.push((entry.0.0, entry.1));
                }
                Ok(TopLevel(fields))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// An object key, borrowed from the input unless it holds escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Key<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The patch request that sets every changing field of `document` (a JSON object) under
/// the SQL `condition`.
pub fn patch_of_document(document: &[u8], condition: &str) -> Vec<u8> {
    let TopLevel(fields) = serde_json::from_slice(document).expect("documents are JSON objects");
    let mut out = Vec::with_capacity(document.len() + condition.len() + 400);
    out.extend_from_slice(b"{\"operations\":[");
    let value_of = |field: &str| {
        fields
            .iter()
            .find(|(name, _)| name == field)
            .map(|(_, v)| *v)
    };
    let present = patched_fields().filter_map(|field| Some((field, value_of(field)?)));
    for (i, (field, value)) in present.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"op\":\"set\",\"path\":\"/");
        out.extend_from_slice(field.as_bytes());
        out.extend_from_slice(b"\",\"value\":");
        out.extend_from_slice(value.get().as_bytes());
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"condition\":");
    serde_json::to_writer(&mut out, condition).expect("writing to a Vec cannot fail");
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn position() -> Position {
        telemetry::wire::decode(
            br#"{"v":1,"deviceId":"drone-7","seq":9,"ts":"2026-11-22T09:15:02.500Z","lat":47.5,"lon":-122.25,"altM":100.0}"#,
        )
        .unwrap()
    }

    #[test]
    fn patch_fits_the_service_limit() {
        assert!(patched_fields().count() <= MAX_PATCH_OPERATIONS);
        // Every field a latest document can carry is either fixed or patched.
        for field in DOCUMENT_FIELDS {
            assert!(FIXED_FIELDS.contains(&field) || patched_fields().any(|f| f == field));
        }
    }

    #[test]
    fn patch_sets_the_document_values_it_has() {
        let encoder = Encoder::new(DocumentLayout::default(), true, None);
        let encoded = encoder.encode(&position(), None);
        let patch: Value = serde_json::from_slice(encoded.patch.as_ref().unwrap()).unwrap();
        let ops = patch["operations"].as_array().unwrap();
        let value_of = |path: &str| {
            ops.iter()
                .find(|op| op["path"] == path)
                .map_or(Value::Null, |op| op["value"].clone())
        };
        assert_eq!(value_of("/seq"), json!(9));
        assert_eq!(
            value_of("/location"),
            json!({"type":"Point","coordinates":[-122.25,47.5]})
        );
        assert_eq!(value_of("/altM"), json!(100.0));
        // Absent fields are not patched: seq, deviceTime, deviceTimeMs, location, altM.
        assert_eq!(ops.len(), 5);
        assert!(ops.iter().all(|op| op["op"] == "set"));
        assert_eq!(
            patch["condition"],
            "FROM c WHERE c.deviceTimeMs < 1795338902500 OR (c.deviceTimeMs = 1795338902500 AND c.seq < 9)"
        );
        // The patch parses as the wire type the local endpoint reads.
        let parsed: cosmos::PatchRequest =
            serde_json::from_slice(encoded.patch.as_ref().unwrap()).unwrap();
        assert_eq!(parsed.operations.len(), ops.len());
        assert!(encoded.history.is_none());
    }

    #[test]
    fn patch_reads_escaped_keys_too() {
        let patch = patch_of_document(br#"{"id":"a","se\u0071":4,"other":1}"#, "FROM c WHERE true");
        let patch: Value = serde_json::from_slice(&patch).unwrap();
        assert_eq!(
            patch["operations"],
            json!([{"op":"set","path":"/seq","value":4}])
        );
    }

    #[test]
    fn history_document_has_its_own_id_and_ttl() {
        let encoder = Encoder::new(DocumentLayout::default(), false, Some(Some(3600)));
        let encoded = encoder.encode(&position(), None);
        assert!(encoded.patch.is_none());
        let history: Value = serde_json::from_slice(encoded.history.as_ref().unwrap()).unwrap();
        assert_eq!(history["id"], "drone-7:9");
        assert_eq!(history["ttl"], 3600);
        let latest: Value = serde_json::from_slice(&encoded.latest).unwrap();
        assert_eq!(latest["id"], "drone-7");
    }
}

//! The documents of agent facts (connection state, version) on the drone's latest document,
//! which the write engine sends ([`super::engine`]), each fact in its own order: a conditional Patch of the fields [`telemetry::document::AGENT_FIELDS`] names, under
//! the condition that the stored fact is older (connection events by `sequenceNumber`, a
//! string of fixed-width hexadecimal digits that sorts in the order of the events; versions
//! by the twin's `version`). The position's fields are not touched, so the newest-wins rule
//! of positions holds as it is.
//!
//! The same state machine as a position's ([`super::newest_wins`], Patch mode): 200 written,
//! 412 superseded (an older event replayed), 404 Create a document of the fact alone (the
//! agent connected before the drone's first position; a position's conditional patch then
//! finds no stored position and applies), 409 Patch again. In ETag mode (a server without
//! Patch in batches) a fact cannot be applied without replacing the position, so it is
//! dead-lettered as `unsupported_event`.
//!
//! Cost: one Patch of a document of about 1 KB, about what a Replace costs (~10 RU); a
//! drone connects and disconnects a few times a day, and its version changes rarely.

use bytes::Bytes;
use chrono::SecondsFormat;
use serde_json::{Map, Value, json};
use telemetry::document::{AGENT_FIELDS, DOCUMENT_SCHEMA_VERSION, DocumentLayout, document_id};

use crate::pipeline::agent::{AgentFact, ConnectionOp};

/// The fields a fact sets, and the condition that the stored fact is older.
fn fields(fact: &AgentFact) -> (Vec<(&'static str, Value)>, String) {
    let [
        connected,
        connected_at,
        disconnected_at,
        connection_seq,
        version_field,
        twin_version_field,
    ] = AGENT_FIELDS;
    match fact {
        AgentFact::Connection { op, at, sequence } => {
            let at = Value::from(at.to_rfc3339_opts(SecondsFormat::Millis, true));
            let (is_connected, at_field) = match op {
                ConnectionOp::Connected => (true, connected_at),
                ConnectionOp::Disconnected => (false, disconnected_at),
            };
            // The sequence number is hexadecimal digits only (checked by the pipeline), so
            // it is quoted as it is.
            let condition = format!(
                "FROM c WHERE NOT IS_DEFINED(c.{connection_seq}) OR c.{connection_seq} < '{sequence}'"
            );
            let fields = vec![
                (connected, Value::from(is_connected)),
                (at_field, at),
                (connection_seq, Value::from(sequence.as_str())),
            ];
            (fields, condition)
        }
        AgentFact::Version {
            twin_version,
            version,
            ..
        } => {
            let condition = format!(
                "FROM c WHERE NOT IS_DEFINED(c.{twin_version_field}) OR c.{twin_version_field} < {twin_version}"
            );
            let fields = vec![
                (version_field, Value::from(version.as_str())),
                (twin_version_field, Value::from(*twin_version)),
            ];
            (fields, condition)
        }
    }
}

/// The conditional patch that applies `fact` over an older stored fact.
pub(super) fn patch(fact: &AgentFact) -> Bytes {
    let (fields, condition) = fields(fact);
    let operations: Vec<Value> = fields
        .into_iter()
        .map(|(name, value)| json!({"op": "set", "path": format!("/{name}"), "value": value}))
        .collect();
    Bytes::from(
        serde_json::to_vec(&json!({"operations": operations, "condition": condition}))
            .expect("JSON values serialize"),
    )
}

/// The latest document of a drone with no position yet: its ids and `fact`.
pub(super) fn document(layout: &DocumentLayout, device_id: &str, fact: &AgentFact) -> Bytes {
    let mut doc = Map::new();
    doc.insert("id".into(), document_id(device_id).into());
    doc.insert("deviceId".into(), device_id.into());
    let path = layout.partition_key_path();
    if !path.is_device_id_field() {
        // The device id at the partition key path, nested objects made on the way.
        let (last, parents) = path.segments().split_last().expect("a path has a segment");
        let mut at = &mut doc;
        for segment in parents {
            at = at
                .entry(segment.clone())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("the documents' own fields are not partition key paths");
        }
        at.insert(last.clone(), device_id.into());
    }
    doc.insert("kind".into(), "latest".into());
    doc.insert("schemaVersion".into(), DOCUMENT_SCHEMA_VERSION.into());
    for (name, value) in fields(fact).0 {
        doc.insert(name.into(), value);
    }
    Bytes::from(serde_json::to_vec(&doc).expect("JSON values serialize"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::agent::TwinOp;

    fn connected() -> AgentFact {
        AgentFact::Connection {
            op: ConnectionOp::Connected,
            at: "2022-06-01T18:43:04.5561024Z".parse().unwrap(),
            sequence: "000000000000000001D8713FF7E0851400000002000000000000000000000007".into(),
        }
    }

    #[test]
    fn a_connection_patch_sets_its_fields_over_an_older_event() {
        let patch: Value = serde_json::from_slice(&patch(&connected())).unwrap();
        assert_eq!(
            patch,
            json!({
                "operations": [
                    {"op": "set", "path": "/agentConnected", "value": true},
                    {"op": "set", "path": "/agentConnectedAt", "value": "2022-06-01T18:43:04.556Z"},
                    {"op": "set", "path": "/agentConnectionSeq", "value": "000000000000000001D8713FF7E0851400000002000000000000000000000007"},
                ],
                "condition": "FROM c WHERE NOT IS_DEFINED(c.agentConnectionSeq) OR c.agentConnectionSeq < '000000000000000001D8713FF7E0851400000002000000000000000000000007'"
            })
        );
        // It parses as the wire type the local endpoint reads.
        let bytes = super::patch(&connected());
        let parsed: cosmos::PatchRequest = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(parsed.operations.len(), 3);
    }

    #[test]
    fn a_version_patch_is_ordered_by_the_twin_version() {
        let fact = AgentFact::Version {
            op: TwinOp::Update,
            twin_version: 12,
            version: "0.1.0".into(),
        };
        let patch: Value = serde_json::from_slice(&patch(&fact)).unwrap();
        assert_eq!(
            patch["condition"],
            "FROM c WHERE NOT IS_DEFINED(c.agentTwinVersion) OR c.agentTwinVersion < 12"
        );
        assert_eq!(patch["operations"][0]["value"], "0.1.0");
    }

    #[test]
    fn a_document_without_position_carries_the_ids_and_the_fact() {
        let layout = DocumentLayout::new("/fleet/deviceId".parse().unwrap());
        let doc: Value =
            serde_json::from_slice(&document(&layout, "drone#1", &connected())).unwrap();
        assert_eq!(doc["id"], "drone%231");
        assert_eq!(doc["deviceId"], "drone#1");
        assert_eq!(doc["fleet"]["deviceId"], "drone#1");
        assert_eq!(doc["kind"], "latest");
        assert_eq!(doc["agentConnected"], true);
        assert!(doc.get("location").is_none());
        assert!(doc.get("deviceTimeMs").is_none());
    }
}

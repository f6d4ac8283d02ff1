//! Transactional batch and bulk requests: the operations of the request body and the
//! per-operation results of the response.
//!
//! The client writes bodies with [`BatchBody`], which copies already-serialized documents
//! instead of serializing them again; the local endpoint reads them as [`BatchOperation`]s.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most operations one batch request may carry.
pub const MAX_OPERATIONS: usize = 100;
/// Largest batch request body the service accepts.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Body size at which the SDKs close a bulk batch.
pub const TARGET_BODY_BYTES: usize = 220_201;

/// The kind of one batch operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OperationType {
    /// Create a document; 409 if it exists.
    Create,
    /// Create or replace a document.
    Upsert,
    /// Read a document.
    Read,
    /// Delete a document.
    Delete,
    /// Replace an existing document; 404 if it does not exist.
    Replace,
    /// Apply patch operations to an existing document.
    Patch,
}

impl OperationType {
    /// The name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "Create",
            Self::Upsert => "Upsert",
            Self::Read => "Read",
            Self::Delete => "Delete",
            Self::Replace => "Replace",
            Self::Patch => "Patch",
        }
    }
}

/// One operation of a batch request body, as the server reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchOperation {
    /// What to do.
    pub operation_type: OperationType,
    /// The partition key as a JSON array in a string, e.g. `["drone-42"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_key: Option<String>,
    /// The document id, for Read, Delete, Replace and Patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The document (Create, Upsert, Replace) or the patch request (Patch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_body: Option<Value>,
    /// Apply only if the document's ETag matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_match: Option<String>,
    /// Apply only if the document's ETag does not match (`*`: only if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_none_match: Option<String>,
}

/// One operation's result in a batch response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationResult {
    /// HTTP status of this operation.
    pub status_code: u16,
    /// Substatus, 0 when none.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub sub_status_code: u32,
    /// Request units this operation cost.
    #[serde(default)]
    pub request_charge: f64,
    /// On 429: how long to wait before retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_milliseconds: Option<u64>,
    /// The document's new ETag after a write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e_tag: Option<String>,
    /// The document, for reads and unless minimal return was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_body: Option<Value>,
}

/// One operation's result without its document: what a bulk writer reads. Parsing skips the
/// `resourceBody` without building it, which keeps large 207 responses cheap to read.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationStatus {
    /// HTTP status of this operation.
    pub status_code: u16,
    /// Substatus, 0 when none.
    #[serde(default)]
    pub sub_status_code: u32,
    /// Request units this operation cost.
    #[serde(default)]
    pub request_charge: f64,
    /// On 429: how long to wait before retrying.
    #[serde(default)]
    pub retry_after_milliseconds: Option<u64>,
    /// The document's new ETag after a write.
    #[serde(default)]
    pub e_tag: Option<String>,
}

/// Parses the body of a batch response (HTTP 200 or 207) into results without documents.
pub fn parse_statuses(body: &[u8]) -> Result<Vec<OperationStatus>, serde_json::Error> {
    serde_json::from_slice(body)
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// The undefined partition key as headers and batch operations carry it: the logical partition
/// of documents without the container's partition key property (see
/// [`crate::epk::epk_u128_of_undefined`]).
pub const UNDEFINED_PARTITION_KEY_JSON: &str = "[{}]";

/// The partition key of a single string value as the JSON array that headers and batch
/// operations carry, e.g. `["drone-42"]`. Non-ASCII characters are escaped as `\uXXXX`, as the
/// SDKs do, so that the value is a valid header.
pub fn partition_key_json(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 4);
    out.push_str("[\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push_str("\"]");
    out
}

/// A batch request body under construction: a JSON array of operations whose documents are
/// copied in as bytes already serialized.
#[derive(Debug, Default, Clone)]
pub struct BatchBody {
    buf: Vec<u8>,
    count: usize,
}

/// One operation to append to a [`BatchBody`].
#[derive(Debug, Clone, Copy)]
pub struct OperationRef<'a> {
    /// What to do.
    pub operation_type: OperationType,
    /// The partition key JSON array (see [`partition_key_json`]).
    pub partition_key: &'a str,
    /// The id, for operations that name a document.
    pub id: Option<&'a str>,
    /// The serialized document or patch request.
    pub resource_body: Option<&'a [u8]>,
    /// ETag precondition.
    pub if_match: Option<&'a str>,
}

impl BatchBody {
    /// An empty body.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty body with room for `bytes`, such as the sum of its operations'
    /// [`BatchBody::encoded_len`] plus 2, so that it never grows by copying.
    pub fn with_capacity(bytes: usize) -> Self {
        BatchBody {
            buf: Vec::with_capacity(bytes),
            count: 0,
        }
    }

    /// Number of operations so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no operation has been added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Size of the body so far, in bytes (including the closing bracket).
    #[cfg(test)]
    fn byte_len(&self) -> usize {
        self.buf.len() + 1
    }

    /// Bytes that appending `op` would add.
    pub fn encoded_len(op: &OperationRef<'_>) -> usize {
        // Field names, quotes and separators come to under 120 bytes; escapes in the key and
        // id are rare enough to count at twice their length.
        120 + 2 * op.partition_key.len()
            + op.id.map_or(0, |id| 2 * id.len())
            + op.resource_body.map_or(0, <[u8]>::len)
            + op.if_match.map_or(0, |e| 2 * e.len())
    }

    /// Appends one operation. `resource_body` must be valid JSON.
    pub fn push(&mut self, op: &OperationRef<'_>) {
        self.buf.push(if self.count == 0 { b'[' } else { b',' });
        self.buf.extend_from_slice(b"{\"operationType\":\"");
        self.buf
            .extend_from_slice(op.operation_type.as_str().as_bytes());
        self.buf.extend_from_slice(b"\",\"partitionKey\":");
        write_json_str(&mut self.buf, op.partition_key);
        if let Some(id) = op.id {
            self.buf.extend_from_slice(b",\"id\":");
            write_json_str(&mut self.buf, id);
        }
        if let Some(etag) = op.if_match {
            self.buf.extend_from_slice(b",\"ifMatch\":");
            write_json_str(&mut self.buf, etag);
        }
        if let Some(body) = op.resource_body {
            self.buf.extend_from_slice(b",\"resourceBody\":");
            self.buf.extend_from_slice(body);
        }
        self.buf.push(b'}');
        self.count += 1;
    }

    /// The finished body.
    pub fn finish(mut self) -> Vec<u8> {
        if self.count == 0 {
            self.buf.push(b'[');
        }
        self.buf.push(b']');
        self.buf
    }
}

fn write_json_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing a string to a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn body_encodes_operations_the_service_reads() {
        let doc = br#"{"id":"drone-42","deviceId":"drone-42"}"#;
        let pk = partition_key_json("drone-42");
        let mut body = BatchBody::new();
        body.push(&OperationRef {
            operation_type: OperationType::Upsert,
            partition_key: &pk,
            id: None,
            resource_body: Some(doc),
            if_match: None,
        });
        body.push(&OperationRef {
            operation_type: OperationType::Replace,
            partition_key: &pk,
            id: Some("drone-42"),
            resource_body: Some(doc),
            if_match: Some("\"etag-1\""),
        });
        let bytes = body.finish();
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            value,
            json!([
                {"operationType":"Upsert","partitionKey":"[\"drone-42\"]",
                 "resourceBody":{"id":"drone-42","deviceId":"drone-42"}},
                {"operationType":"Replace","partitionKey":"[\"drone-42\"]","id":"drone-42",
                 "ifMatch":"\"etag-1\"","resourceBody":{"id":"drone-42","deviceId":"drone-42"}}
            ])
        );
        let ops: Vec<BatchOperation> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(ops[1].if_match.as_deref(), Some("\"etag-1\""));
        assert_eq!(BatchBody::new().finish(), b"[]");
    }

    #[test]
    fn a_body_reserved_at_its_encoded_length_does_not_grow() {
        let pk = partition_key_json("drone-\"7\"");
        let doc = br#"{"id":"a","v":[1,2,3]}"#;
        let ops = [
            OperationRef {
                operation_type: OperationType::Patch,
                partition_key: &pk,
                id: Some("drone-\"7\""),
                resource_body: Some(doc),
                if_match: Some("\"etag\""),
            },
            OperationRef {
                operation_type: OperationType::Create,
                partition_key: &pk,
                id: None,
                resource_body: Some(doc),
                if_match: None,
            },
        ];
        let reserved = ops.iter().map(BatchBody::encoded_len).sum::<usize>() + 2;
        let mut body = BatchBody::with_capacity(reserved);
        for op in &ops {
            body.push(op);
        }
        let bytes = body.finish();
        assert!(bytes.len() <= reserved);
        assert_eq!(bytes.capacity(), reserved, "the body grew");
        let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(parsed.as_array().unwrap().len(), 2);
    }

    #[test]
    fn parses_207_with_per_operation_throttles() {
        let body = br#"[
            {"statusCode":201,"requestCharge":5.71,"eTag":"\"00-1\""},
            {"statusCode":429,"subStatusCode":3200,"requestCharge":0,"retryAfterMilliseconds":120},
            {"statusCode":410,"subStatusCode":1002},
            {"statusCode":200,"requestCharge":1.0,"resourceBody":{"id":"a"}}
        ]"#;
        let results = serde_json::from_slice::<Vec<OperationResult>>(body).unwrap();
        assert_eq!(results.len(), 4);
        assert_eq!(results[0].status_code, 201);
        assert_eq!(results[0].e_tag.as_deref(), Some("\"00-1\""));
        assert_eq!(results[1].status_code, 429);
        assert_eq!(results[1].sub_status_code, 3200);
        assert_eq!(results[1].retry_after_milliseconds, Some(120));
        assert_eq!(results[2].sub_status_code, 1002);
        assert_eq!(results[3].resource_body, Some(json!({"id":"a"})));

        let statuses = parse_statuses(body).unwrap();
        assert_eq!(statuses.len(), 4);
        assert_eq!(statuses[1].status_code, 429);
        assert_eq!(statuses[1].sub_status_code, 3200);
        assert_eq!(statuses[1].retry_after_milliseconds, Some(120));
        assert_eq!(statuses[0].e_tag.as_deref(), Some("\"00-1\""));
        assert_eq!(statuses[3].request_charge, 1.0);
    }

    #[test]
    fn partition_key_json_escapes() {
        assert_eq!(partition_key_json("drone-42"), r#"["drone-42"]"#);
        assert_eq!(partition_key_json("a\"b"), r#"["a\"b"]"#);
        assert_eq!(partition_key_json("é"), r#"["\u00e9"]"#);
    }

    proptest! {
        #[test]
        fn partition_key_json_is_a_json_array_of_the_value(s in ".*") {
            let json = partition_key_json(&s);
            prop_assert!(json.is_ascii());
            let parsed: Vec<String> = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(parsed, vec![s]);
        }

        #[test]
        fn encoded_len_bounds_the_growth(id in "[a-z0-9:\"-]{1,40}", n in 0usize..400) {
            let pk = partition_key_json(&id);
            let doc = format!("{{\"id\":{},\"pad\":\"{}\"}}", serde_json::to_string(&id).unwrap(), "x".repeat(n));
            let op = OperationRef { operation_type: OperationType::Upsert, partition_key: &pk,
                id: Some(&id), resource_body: Some(doc.as_bytes()), if_match: Some("\"e\"") };
            let mut body = BatchBody::new();
            let before = body.byte_len();
            body.push(&op);
            prop_assert!(body.byte_len() - before <= BatchBody::encoded_len(&op));
        }
    }
}

//! Bodies of the resources both sides exchange: containers and their partition key definition,
//! partition key ranges, patch requests, queries and error bodies.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// A container's partition key definition, e.g. `{"paths":["/deviceId"],"kind":"Hash","version":2}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionKeyDefinition {
    /// The key paths (one for a plain key).
    pub paths: Vec<String>,
    /// Always `Hash` here.
    #[serde(default = "hash_kind")]
    pub kind: String,
    /// Hash version; 2 for new containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u8>,
}

fn hash_kind() -> String {
    "Hash".to_string()
}

impl PartitionKeyDefinition {
    /// A hash-v2 definition on one path.
    pub fn hash_v2(path: &str) -> Self {
        Self {
            paths: vec![path.to_string()],
            kind: hash_kind(),
            version: Some(2),
        }
    }
}

/// A container's properties as created and returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerProperties {
    /// The container name.
    pub id: String,
    /// How documents are partitioned.
    pub partition_key: PartitionKeyDefinition,
    /// The indexing policy, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indexing_policy: Option<Value>,
    /// Default time to live in seconds (-1: on, no default expiry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_ttl: Option<i64>,
}

/// One partition key range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionKeyRange {
    /// The range id; some servers send it as a number.
    #[serde(deserialize_with = "string_or_number")]
    pub id: String,
    /// Lowest EPK in the range (`""` is the start of the space).
    #[serde(rename = "minInclusive")]
    pub min_inclusive: String,
    /// EPK past the range (`"FF"` is the end of the space).
    #[serde(rename = "maxExclusive")]
    pub max_exclusive: String,
    /// Ids of the ranges this one was split from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
}

fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        S(String),
        N(serde_json::Number),
    }
    Ok(match Id::deserialize(d)? {
        Id::S(s) => s,
        Id::N(n) => n.to_string(),
    })
}

/// The body of `GET .../pkranges`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionKeyRanges {
    /// The ranges of this page.
    #[serde(rename = "PartitionKeyRanges")]
    pub ranges: Vec<PartitionKeyRange>,
    /// Number of ranges in this page.
    #[serde(rename = "_count", default)]
    pub count: usize,
}

/// One patch operation, e.g. `{"op":"set","path":"/location","value":{...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchOperation {
    /// `add`, `set`, `replace`, `remove`, `incr` or `move`.
    pub op: String,
    /// The JSON path it applies to.
    pub path: String,
    /// The value, for all but `remove`. A `"value": null` that is present reads as
    /// `Some(Value::Null)` (a `set` to null), an absent one as `None`.
    #[serde(
        default,
        deserialize_with = "present_value",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<Value>,
}

/// Reads a present `value`, `null` included, as `Some`.
fn present_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The body of a patch request: the operations and an optional SQL condition
/// (`from c where ...`) that must hold for the patch to apply (else 412).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchRequest {
    /// The operations, applied in order.
    pub operations: Vec<PatchOperation>,
    /// The condition predicate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

/// A query body: SQL text and named parameters (`@name`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryRequest {
    /// The SQL text.
    pub query: String,
    /// The parameters.
    #[serde(default)]
    pub parameters: Vec<QueryParameter>,
}

/// One named query parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryParameter {
    /// The name, with its `@`.
    pub name: String,
    /// The value.
    pub value: Value,
}

/// The body of a feed or query page: `{"Documents":[...],"_count":n}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentFeed {
    /// The documents of this page.
    #[serde(rename = "Documents")]
    pub documents: Vec<Value>,
    /// How many.
    #[serde(rename = "_count", default)]
    pub count: usize,
}

/// The body of an error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A short code such as `Unauthorized` or `TooManyRequests`.
    pub code: String,
    /// A human-readable message (on 401 it quotes the string the server signed).
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_accept_string_and_number_ids() {
        let body = br#"{"PartitionKeyRanges":[{"id":0,"minInclusive":"","maxExclusive":"FF"},
            {"id":"3","minInclusive":"","maxExclusive":"FF","parents":["0"]}],"_count":2}"#;
        let parsed: PartitionKeyRanges = serde_json::from_slice(body).unwrap();
        assert_eq!(parsed.ranges[0].id, "0");
        assert_eq!(parsed.ranges[1].id, "3");
        assert_eq!(parsed.ranges[1].parents, vec!["0".to_string()]);
        assert_eq!(parsed.count, 2);
    }

    #[test]
    fn patch_value_null_is_a_value_and_absent_is_none() {
        let body = br#"{"operations":[{"op":"set","path":"/a","value":null},{"op":"remove","path":"/b"}]}"#;
        let parsed: PatchRequest = serde_json::from_slice(body).unwrap();
        assert_eq!(parsed.operations[0].value, Some(Value::Null));
        assert_eq!(parsed.operations[1].value, None);
        let json = serde_json::to_value(&parsed).unwrap();
        assert_eq!(json["operations"][0]["value"], Value::Null);
        assert!(json["operations"][1].get("value").is_none());
    }

    #[test]
    fn container_definition_round_trips() {
        let c = ContainerProperties {
            id: "positions".into(),
            partition_key: PartitionKeyDefinition::hash_v2("/deviceId"),
            indexing_policy: None,
            default_ttl: Some(3600),
        };
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["partitionKey"]["version"], 2);
        assert_eq!(json["defaultTtl"], 3600);
        assert_eq!(
            serde_json::from_value::<ContainerProperties>(json).unwrap(),
            c
        );
    }
}

//! Partition key values as requests carry them: a string, or the *undefined* key of documents
//! that lack the container's partition key property.
//!
//! Cosmos DB stores a document without a value at the container's key path in the undefined
//! logical partition, addressed as `[{}]` in the `x-ms-documentdb-partitionkey` header and in
//! batch operations. It hashes to a single EPK, so every such document lands in one physical
//! partition: the hot partition of a writer that never puts the key into its documents.

use std::fmt;

use cosmos_wire::batch::{UNDEFINED_PARTITION_KEY_JSON, partition_key_json};
use cosmos_wire::epk::{epk_u128_of_str, epk_u128_of_undefined};

/// A partition key value (containers with a single key path, hash version 2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PartitionKey {
    /// The string at the document's key path.
    String(String),
    /// No value: the document lacks the key path. All such documents share one logical
    /// partition, hence one physical partition.
    Undefined,
}

impl PartitionKey {
    /// The key as the JSON array headers and batch operations carry: `["drone-42"]`, or
    /// `[{}]` for the undefined key.
    pub(crate) fn to_json(&self) -> String {
        match self {
            Self::String(value) => partition_key_json(value),
            Self::Undefined => UNDEFINED_PARTITION_KEY_JSON.to_string(),
        }
    }

    /// The effective partition key as a number, which locates the key's range.
    pub(crate) fn epk(&self) -> u128 {
        match self {
            Self::String(value) => epk_u128_of_str(value),
            Self::Undefined => epk_u128_of_undefined(),
        }
    }
}

impl From<String> for PartitionKey {
    fn from(value: String) -> Self {
        Self::String(value)
    }
}

impl From<&String> for PartitionKey {
    fn from(value: &String) -> Self {
        Self::String(value.clone())
    }
}

impl From<&str> for PartitionKey {
    fn from(value: &str) -> Self {
        Self::String(value.to_string())
    }
}

impl From<&PartitionKey> for PartitionKey {
    fn from(value: &PartitionKey) -> Self {
        value.clone()
    }
}

impl fmt::Display for PartitionKey {
    /// The value, or `undefined`: for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::String(value) => f.write_str(value),
            Self::Undefined => f.write_str("undefined"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn undefined_key_is_the_empty_object_and_its_own_epk() {
        let undefined = PartitionKey::Undefined;
        assert_eq!(undefined.to_json(), "[{}]");
        // The hash v2 vector of the undefined key (cosmos_wire::epk).
        assert_eq!(undefined.epk(), 0x1162_2DAA_78F8_3583_4610_ABE5_6EFF_5CB5);
        assert_eq!(undefined.to_string(), "undefined");
        // No string spells it.
        for s in ["", "{}", "[{}]", "undefined", "null"] {
            assert_ne!(PartitionKey::from(s).epk(), undefined.epk(), "{s:?}");
            assert_ne!(
                PartitionKey::from(s).to_json(),
                undefined.to_json(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_string_key_has_the_hash_v2_epk_of_its_value() {
        // The published vector of "redmond" (cosmos_wire::epk).
        assert_eq!(
            PartitionKey::from("redmond").epk(),
            0x22E3_42F3_8A48_6A08_8463_DFF7_838A_5963
        );
    }

    proptest! {
        #[test]
        fn string_keys_keep_their_wire_form(value in ".{0,40}") {
            let key = PartitionKey::from(value.as_str());
            prop_assert_eq!(key.to_json(), partition_key_json(&value));
            let json: Vec<String> = serde_json::from_str(&key.to_json()).unwrap();
            prop_assert_eq!(json, vec![value]);
        }
    }
}

//! The indexing policy the position documents are written for: the read side's filters and
//! orders (`kind`, `deviceId`, `deviceTimeMs`; a track segment's `startMs` and `endMs`,
//! never its `points`) and a spatial index on `location`, nothing else (not the GNSS health, `gnss`: no query filters on it). Cosmos DB's default indexes
//! every path, and a write is charged for every indexed term it changes; a drone's new
//! position changes about a dozen under the default policy and three under this one
//! (`deviceTimeMs`, `location`, and `_ts`, always indexed).
//!
//! The policy is `deploy/cosmos/indexing-policy.json`, embedded here, so that infrastructure
//! code and the writer's `COSMOS_CREATE_IF_MISSING` create the same container.

use serde_json::Value;

/// The policy's text, as `deploy/cosmos/indexing-policy.json` holds it.
pub const INDEXING_POLICY_JSON: &str = include_str!("../../../deploy/cosmos/indexing-policy.json");

/// The indexing policy of a positions container.
pub fn indexing_policy() -> Value {
    serde_json::from_str(INDEXING_POLICY_JSON).expect("deploy/cosmos/indexing-policy.json is JSON")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_policy_parses() {
        let policy = super::indexing_policy();
        assert_eq!(policy["excludedPaths"][0]["path"], "/*");
    }

    /// Only the read side's paths are indexed: not the GNSS health, nor any other field.
    #[test]
    fn only_the_read_side_paths_are_indexed() {
        let policy = super::indexing_policy();
        let included: Vec<&str> = policy["includedPaths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            included,
            [
                "/kind/?",
                "/deviceId/?",
                "/deviceTimeMs/?",
                "/startMs/?",
                "/endMs/?"
            ]
        );
        assert_eq!(policy["excludedPaths"][1]["path"], "/points/*");
        let spatial = policy["spatialIndexes"].as_array().unwrap();
        assert_eq!(spatial.len(), 1);
        assert_eq!(spatial[0]["path"], "/location/*");
    }
}

//! What a container's indexing policy makes each position cost, for `cloud-writer check`:
//! the RU of one drone's new position (the conditional patch of its latest document, as
//! Cosmos DB charges it: [`cosmos_wire::charges`]) under the container's policy and under the
//! project's ([`telemetry::indexing_policy`]), and the paths the read side filters, orders
//! or searches on that the container's policy leaves out.

use chrono::{TimeZone, Utc};
use cosmos_wire::charges::{self, TermChanges};
use cosmos_wire::indexing::IndexingPolicy;
use serde_json::Value;
use telemetry::{DocumentLayout, Position};

/// Paths fleet-api filters or orders on (range index), and the one it searches (spatial).
const READ_PATHS: [&str; 5] = ["kind", "deviceId", "deviceTimeMs", "startMs", "endMs"];
const SPATIAL_PATH: &str = "location";

/// A policy's cost per position and what it leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyCost {
    /// RU of one drone's new position (a patch of its latest document).
    pub ru_per_position: f64,
    /// RU of one history document (a create), when history is kept.
    pub ru_per_history_document: f64,
    /// Paths the read side needs that the policy does not index (`/location` when it has no
    /// spatial index there).
    pub missing: Vec<String>,
}

/// The cost of `policy` (a container's `indexingPolicy`) for the documents of `layout`; an
/// error says what is wrong with the policy.
pub fn policy_cost(policy: &Value, layout: &DocumentLayout) -> Result<PolicyCost, String> {
    let policy = IndexingPolicy::parse(policy)?;
    let (before, after) = (sample(layout, 1, 0.0), sample(layout, 2, 0.001));
    let (old, new) = (policy.terms(&before), policy.terms(&after));
    let changes = TermChanges {
        removed: old.difference(&new).count(),
        added: new.difference(&old).count(),
    };
    let size = |doc: &Value| doc.to_string().len();
    let mut missing: Vec<String> = READ_PATHS
        .iter()
        .filter(|p| !policy.indexes(&[**p]))
        .map(|p| format!("/{p}"))
        .collect();
    if !policy.indexes_spatially(&[SPATIAL_PATH]) {
        missing.push(format!("/{SPATIAL_PATH} (spatial)"));
    }
    let history = stored(layout.history(&position(2, 0.001), None, None), 2);
    Ok(PolicyCost {
        ru_per_position: charges::patch(size(&before), size(&after), changes),
        ru_per_history_document: charges::create(size(&history), policy.terms(&history).len()),
        missing,
    })
}

/// The latest document of a drone's `seq`th position, moved east by `east` degrees, as
/// stored.
fn sample(layout: &DocumentLayout, seq: u64, east: f64) -> Value {
    let pos = position(seq, east);
    stored(
        layout.latest(&pos, Some(pos.ts + chrono::Duration::milliseconds(600))),
        seq,
    )
}

/// A drone's `seq`th position, moved east by `east` degrees.
fn position(seq: u64, east: f64) -> Position {
    Position {
        device_id: "drone-0001".into(),
        seq,
        ts: Utc
            .timestamp_opt(1_795_338_900 + 5 * seq as i64, 0)
            .unwrap(),
        lat: 47.6205,
        lon: -122.3493 + east,
        alt_m: Some(120.0 + seq as f64),
        heading_deg: Some(90.0 + seq as f64),
        speed_mps: Some(12.0 + seq as f64),
        battery_pct: Some(90 - seq as u8),
        gnss: Default::default(),
    }
}

/// `doc` with the `_ts` the service stamps on the `seq`th write.
fn stored(mut doc: Value, seq: u64) -> Value {
    doc["_ts"] = Value::from(1_795_338_901 + 5 * seq);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_project_policy_costs_less_than_the_default_and_misses_nothing() {
        let layout = DocumentLayout::default();
        let project = policy_cost(&telemetry::indexing_policy(), &layout).unwrap();
        assert!(project.missing.is_empty(), "{project:?}");
        let default = policy_cost(
            &json!({"includedPaths": [{"path": "/*"}], "excludedPaths": [{"path": "/\"_etag\"/?"}]}),
            &layout,
        )
        .unwrap();
        assert_eq!(default.missing, ["/location (spatial)"]);
        assert!(
            project.ru_per_position <= 0.7 * default.ru_per_position,
            "{project:?} against {default:?}"
        );
    }
}

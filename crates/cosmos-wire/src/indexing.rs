//! A container's indexing policy as the service reads it ("Indexing policies in Azure Cosmos
//! DB"), and the indexed terms it makes of a document, which writes are charged for
//! ([`crate::charges`]).
//!
//! - Mode `consistent` (the default) or `none` (nothing indexed, not even `id` and `_ts`).
//! - Included and excluded paths: `/?` ends a path to a scalar, `/*` covers everything below
//!   a node, `/[]` stands for any element of an array, a segment may be quoted
//!   (`/"_etag"/?`). Of the rules that match a path the most precise decides: the deeper one,
//!   and at equal depth `/?` before `/*`. Without a policy a container gets the default:
//!   everything included but `_etag`.
//! - `id` and `_ts` are always indexed in consistent mode, whatever the paths say; the other
//!   system properties never are.
//! - Spatial indexes (`spatialIndexes`): a GeoJSON value at one of their paths is indexed
//!   for the spatial functions.
//!
//! The terms of a document: one per scalar value at an indexed path (an array element's path
//! carries its position), and one per GeoJSON value under a spatial index. Microsoft does not
//! define an "indexed term"; this is the reading the charge model rests on, stated once here.

use serde_json::Value;
use std::collections::BTreeSet;

/// System properties that are never indexed (`_ts` is always indexed, in consistent mode).
const UNINDEXED_SYSTEM: [&str; 5] = ["_rid", "_self", "_etag", "_attachments", "_lsn"];

/// GeoJSON types a spatial index takes.
const GEOJSON_TYPES: [&str; 4] = ["Point", "Polygon", "MultiPolygon", "LineString"];

/// How a path rule ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    /// `/*`: the node and everything below it.
    Below,
    /// `/?`: the scalar at exactly this path.
    Scalar,
}

/// One included or excluded path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    segments: Vec<String>,
    end: End,
}

impl Rule {
    fn parse(path: &str) -> Option<Rule> {
        let mut segments: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| s.trim_matches('"').to_string())
            .collect();
        let end = match segments.pop()?.as_str() {
            "?" => End::Scalar,
            "*" => End::Below,
            _ => return None,
        };
        Some(Rule { segments, end })
    }

    /// Whether the rule covers `path` (array positions written `[]`), and how precisely.
    fn matches(&self, path: &[&str]) -> Option<(usize, End)> {
        let fits = match self.end {
            End::Scalar => self.segments.len() == path.len(),
            End::Below => self.segments.len() <= path.len(),
        };
        (fits && self.segments.iter().zip(path).all(|(s, p)| s == p))
            .then_some((self.segments.len(), self.end))
    }
}

/// A container's indexing policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexingPolicy {
    /// `indexingMode: none`: nothing is indexed.
    none: bool,
    included: Vec<Rule>,
    excluded: Vec<Rule>,
    spatial: Vec<Rule>,
}

/// The `indexingPolicy` Cosmos DB gives a container created without one: every path but
/// `_etag`, no spatial index.
pub fn default_policy() -> Value {
    serde_json::json!({
        "indexingMode": "consistent",
        "automatic": true,
        "includedPaths": [{"path": "/*"}],
        "excludedPaths": [{"path": "/\"_etag\"/?"}],
    })
}

impl Default for IndexingPolicy {
    /// The service's default ([`default_policy`]).
    fn default() -> Self {
        IndexingPolicy::parse(&default_policy()).expect("the default policy parses")
    }
}

impl IndexingPolicy {
    /// Reads a container's `indexingPolicy`; an error says what is wrong with it.
    pub fn parse(policy: &Value) -> Result<IndexingPolicy, String> {
        let none = match policy.get("indexingMode").and_then(Value::as_str) {
            None => false,
            Some(mode) if mode.eq_ignore_ascii_case("consistent") => false,
            Some(mode) if mode.eq_ignore_ascii_case("none") => true,
            Some(mode) => {
                return Err(format!(
                    "indexingMode {mode:?}: a new container's mode is consistent or none"
                ));
            }
        };
        let rules = |key: &str| -> Result<Vec<Rule>, String> {
            let Some(list) = policy.get(key) else {
                return Ok(Vec::new());
            };
            list.as_array()
                .ok_or(format!("{key} is not an array"))?
                .iter()
                .map(|entry| {
                    let path = entry["path"].as_str().unwrap_or_default();
                    Rule::parse(path).ok_or(format!(
                        "{key}: the path {path:?} must end with /? or /* (for example /location/?)"
                    ))
                })
                .collect()
        };
        let (included, excluded, spatial) = (
            rules("includedPaths")?,
            rules("excludedPaths")?,
            rules("spatialIndexes")?,
        );
        let root = Rule {
            segments: Vec::new(),
            end: End::Below,
        };
        if !none && !included.contains(&root) && !excluded.contains(&root) {
            return Err(
                "the root path /* must be an included or an excluded path of the indexing policy"
                    .into(),
            );
        }
        Ok(IndexingPolicy {
            none,
            included,
            excluded,
            spatial,
        })
    }

    /// Whether the range index covers the scalar at `path` (array positions written `[]`):
    /// `id` and `_ts` always, other paths as the most precise matching rule decides.
    pub fn indexes(&self, path: &[&str]) -> bool {
        if self.none {
            return false;
        }
        if matches!(path, ["id"] | ["_ts"]) {
            return true;
        }
        let best = |rules: &[Rule]| rules.iter().filter_map(|r| r.matches(path)).max();
        match (best(&self.included), best(&self.excluded)) {
            (Some(inc), Some(exc)) => inc > exc,
            (inc, _) => inc.is_some(),
        }
    }

    /// Whether a spatial index covers the GeoJSON value at `path`.
    pub fn indexes_spatially(&self, path: &[&str]) -> bool {
        !self.none && self.spatial.iter().any(|r| r.matches(path).is_some())
    }

    /// The indexed terms of `doc`.
    pub fn terms(&self, doc: &Value) -> BTreeSet<String> {
        let mut terms = BTreeSet::new();
        if self.none {
            return terms;
        }
        let Some(fields) = doc.as_object() else {
            return terms;
        };
        for (name, value) in fields {
            match name.as_str() {
                "id" | "_ts" => {
                    terms.insert(format!("/{name}={value}"));
                }
                n if UNINDEXED_SYSTEM.contains(&n) => {}
                _ => self.walk(
                    value,
                    &mut vec![name.as_str()],
                    &mut vec![name.clone()],
                    &mut terms,
                ),
            }
        }
        terms
    }

    /// Adds the terms of `value` at `pattern` (array positions as `[]`), whose concrete path
    /// (with positions) is `concrete`.
    fn walk<'a>(
        &self,
        value: &'a Value,
        pattern: &mut Vec<&'a str>,
        concrete: &mut Vec<String>,
        terms: &mut BTreeSet<String>,
    ) {
        if is_geojson(value) && self.indexes_spatially(pattern) {
            terms.insert(format!("geo:/{}={value}", concrete.join("/")));
        }
        match value {
            Value::Object(fields) => {
                for (name, v) in fields {
                    pattern.push(name);
                    concrete.push(name.clone());
                    self.walk(v, pattern, concrete, terms);
                    pattern.pop();
                    concrete.pop();
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    pattern.push("[]");
                    concrete.push(i.to_string());
                    self.walk(v, pattern, concrete, terms);
                    pattern.pop();
                    concrete.pop();
                }
            }
            scalar => {
                if self.indexes(pattern) {
                    terms.insert(format!("/{}={scalar}", concrete.join("/")));
                }
            }
        }
    }
}

fn is_geojson(value: &Value) -> bool {
    value["type"]
        .as_str()
        .is_some_and(|t| GEOJSON_TYPES.contains(&t))
        && value.get("coordinates").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn position(lon: f64, seq: u64) -> Value {
        json!({"id": "d1", "deviceId": "d1", "kind": "latest", "seq": seq,
               "deviceTimeMs": 1000 + seq, "location": {"type": "Point", "coordinates": [lon, 47.6]},
               "_rid": "x", "_etag": "\"1\"", "_ts": 5})
    }

    #[test]
    fn the_default_policy_indexes_every_value_but_the_system_properties() {
        let terms = IndexingPolicy::default().terms(&position(-122.3, 1));
        let paths: Vec<&str> = terms.iter().map(|t| t.split('=').next().unwrap()).collect();
        assert_eq!(
            paths,
            [
                "/_ts",
                "/deviceId",
                "/deviceTimeMs",
                "/id",
                "/kind",
                "/location/coordinates/0",
                "/location/coordinates/1",
                "/location/type",
                "/seq"
            ]
        );
    }

    #[test]
    fn the_most_precise_rule_decides_and_spatial_paths_add_one_term_per_shape() {
        let policy = IndexingPolicy::parse(&json!({
            "includedPaths": [{"path": "/kind/?"}, {"path": "/deviceTimeMs/?"}],
            "excludedPaths": [{"path": "/*"}],
            "spatialIndexes": [{"path": "/location/*", "types": ["Point"]}],
        }))
        .unwrap();
        let terms: Vec<String> = policy.terms(&position(-122.3, 1)).into_iter().collect();
        assert_eq!(
            terms,
            [
                "/_ts=5",
                "/deviceTimeMs=1001",
                "/id=\"d1\"",
                "/kind=\"latest\"",
                "geo:/location={\"coordinates\":[-122.3,47.6],\"type\":\"Point\"}"
            ]
        );
        // An excluded subtree inside an included one, and the other way round.
        let policy = IndexingPolicy::parse(&json!({
            "includedPaths": [{"path": "/*"}, {"path": "/a/b/?"}],
            "excludedPaths": [{"path": "/a/*"}],
        }))
        .unwrap();
        assert!(policy.indexes(&["x"]));
        assert!(policy.indexes(&["id"]), "always");
        assert!(!policy.indexes(&["a", "c"]));
        assert!(policy.indexes(&["a", "b"]));
        assert!(!policy.indexes(&["a", "b", "c"]));
    }

    #[test]
    fn mode_none_indexes_nothing_and_a_policy_without_the_root_is_refused() {
        let none = IndexingPolicy::parse(&json!({"indexingMode": "none"})).unwrap();
        assert!(none.terms(&position(0.0, 1)).is_empty());
        let err =
            IndexingPolicy::parse(&json!({"includedPaths": [{"path": "/kind/?"}]})).unwrap_err();
        assert!(err.contains("root path /*"), "{err}");
        let err =
            IndexingPolicy::parse(&json!({"includedPaths": [{"path": "/kind"}]})).unwrap_err();
        assert!(err.contains("must end with /? or /*"), "{err}");
    }
}

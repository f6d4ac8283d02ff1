//! Twin documents as JSON: IoT Hub's merge patch (a null removes, objects merge) with the
//! per-property metadata it keeps, and its way of counting a document's size.

use serde_json::{Map, Value};

/// The size of a section as IoT Hub counts it: every key's characters, and every value's
/// (strings by characters other than control characters, numbers 8, booleans 4, objects and
/// arrays by what they hold); read-only `$` entries do not count.
pub fn section_size(section: &Map<String, Value>) -> usize {
    fn value_size(value: &Value) -> usize {
        match value {
            Value::Null => 0,
            Value::Bool(_) => 4,
            Value::Number(_) => 8,
            Value::String(s) => s.chars().filter(|c| !c.is_control()).count(),
            Value::Array(items) => items.iter().map(value_size).sum(),
            Value::Object(map) => section_size(map),
        }
    }
    section
        .iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| k.chars().count() + value_size(v))
        .sum()
}

/// Applies a merge patch to `doc` and its `metadata`: a null removes a property, an object
/// merges into an object, anything else replaces. Read-only `$` keys of the patch are
/// skipped. Every property set gets `$lastUpdated` (and, for desired, `$lastUpdatedVersion`).
pub(crate) fn merge(
    doc: &mut Map<String, Value>,
    metadata: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    stamp: &Map<String, Value>,
) {
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                doc.remove(key);
                metadata.remove(key);
            }
            Value::Object(inner) => {
                if !doc.get(key).is_some_and(Value::is_object) {
                    doc.insert(key.clone(), Value::Object(Map::new()));
                    metadata.remove(key);
                }
                let meta = metadata
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !meta.is_object() {
                    *meta = Value::Object(Map::new());
                }
                let (Some(Value::Object(child)), Value::Object(child_meta)) =
                    (doc.get_mut(key), meta)
                else {
                    unreachable!("both were made objects above");
                };
                child_meta.extend(stamp.clone());
                merge(child, child_meta, inner, stamp);
            }
            other => {
                doc.insert(key.clone(), other.clone());
                metadata.insert(key.clone(), Value::Object(stamp.clone()));
            }
        }
    }
}

/// The metadata of the keys a patch names, for a twin change event.
pub(crate) fn metadata_of(
    patch: &Map<String, Value>,
    metadata: &Map<String, Value>,
) -> Map<String, Value> {
    let mut out: Map<String, Value> = patch
        .keys()
        .filter_map(|k| metadata.get(k).map(|m| (k.clone(), m.clone())))
        .collect();
    for key in ["$lastUpdated", "$lastUpdatedVersion"] {
        if let Some(v) = metadata.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes_count_as_iot_hub_counts() {
        assert_eq!(
            section_size(json!({"ab": "cd", "n": 1, "t": true}).as_object().unwrap()),
            2 + 2 + 1 + 8 + 1 + 4
        );
        assert_eq!(
            section_size(
                json!({"o": {"k": [1, "ab"]}, "$version": 4})
                    .as_object()
                    .unwrap()
            ),
            1 + 1 + 8 + 2
        );
    }

    #[test]
    fn a_patch_merges_with_metadata_and_a_null_removes() {
        let stamp = json!({"$lastUpdated": "t"}).as_object().cloned().unwrap();
        let mut doc = Map::new();
        let mut metadata = Map::new();
        let patch = json!({"a": {"b": 1, "c": 2}, "d": 3, "$version": 9});
        merge(&mut doc, &mut metadata, patch.as_object().unwrap(), &stamp);
        let patch = json!({"a": {"c": null}, "d": null});
        merge(&mut doc, &mut metadata, patch.as_object().unwrap(), &stamp);
        assert_eq!(Value::Object(doc), json!({"a": {"b": 1}}));
        assert_eq!(
            Value::Object(metadata),
            json!({"a": {"$lastUpdated": "t", "b": {"$lastUpdated": "t"}}})
        );
    }
}

//! A partition key value: its canonical JSON (the logical partition's name) and its EPK, read
//! from a header, a batch operation, a document or its raw JSON.

use crate::raw;
use cosmos_wire::epk::{epk_u128_of_str, epk_u128_of_undefined};
use serde_json::Value;

/// A partition key value: its canonical JSON (the logical partition's name) and its EPK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionKey {
    /// The value as compact JSON, e.g. `"drone-42"` with its quotes; empty for the undefined
    /// key (no JSON value is spelled that way).
    pub canonical: String,
    /// The effective partition key.
    pub epk: u128,
}

impl PartitionKey {
    /// The undefined key (`[{}]` on the wire): the logical partition of documents without a
    /// value at the container's partition key path.
    pub fn undefined() -> Self {
        Self {
            canonical: String::new(),
            epk: epk_u128_of_undefined(),
        }
    }

    /// Whether this is the undefined key.
    pub fn is_undefined(&self) -> bool {
        self.canonical.is_empty()
    }

    /// The key of a document: its value at `path`, or the undefined key if it has none.
    pub fn of_document(doc: &Value, path: &[String]) -> Self {
        key_of_document(doc, path).map_or_else(Self::undefined, Self::from_value)
    }

    /// Whether a document belongs to this logical partition: its value at `path` is this key,
    /// or it has none and this is the undefined key.
    pub fn matches_document(&self, doc: &Value, path: &[String]) -> bool {
        match key_of_document(doc, path) {
            Some(v) => !self.is_undefined() && self.is_value(v),
            None => self.is_undefined(),
        }
    }

    /// From the value of a document's key path.
    pub fn from_value(value: &Value) -> Self {
        let canonical = serde_json::to_string(value).expect("a JSON value serializes");
        let epk = match value {
            Value::String(s) => epk_u128_of_str(s),
            _ => epk_u128_of_str(&canonical),
        };
        Self { canonical, epk }
    }

    /// Whether a document's key value is this key (compared by canonical JSON, no hashing).
    pub fn is_value(&self, value: &Value) -> bool {
        match value {
            // A string that needs no escaping is its canonical form between quotes.
            Value::String(s) if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') => {
                self.canonical.len() == s.len() + 2
                    && self.canonical.starts_with('"')
                    && self.canonical[1..self.canonical.len() - 1] == **s
            }
            _ => serde_json::to_string(value).is_ok_and(|c| c == self.canonical),
        }
    }

    /// A string key that JSON writes without escapes (see [`raw::is_plain`]).
    pub fn of_plain_str(s: &str) -> Self {
        let mut canonical = String::with_capacity(s.len() + 2);
        canonical.push('"');
        canonical.push_str(s);
        canonical.push('"');
        Self {
            canonical,
            epk: epk_u128_of_str(s),
        }
    }

    /// The key of a document from the raw JSON of its value at the key path (see
    /// [`raw::document`]), or the undefined key if it has none.
    pub fn of_raw(raw: Option<&[u8]>) -> Option<Self> {
        let Some(raw) = raw else {
            return Some(Self::undefined());
        };
        if let Some(s) = raw::plain_str(raw) {
            return Some(Self::of_plain_str(s));
        }
        serde_json::from_slice(raw)
            .ok()
            .map(|v| Self::from_value(&v))
    }

    /// Whether the raw JSON of a document's value at the key path (`None`: it has none) is
    /// this key.
    pub fn matches_raw(&self, raw: Option<&[u8]>) -> bool {
        match raw {
            None => self.is_undefined(),
            Some(_) if self.is_undefined() => false,
            Some(raw) if raw == self.canonical.as_bytes() => true,
            Some(raw) => serde_json::from_slice::<Value>(raw).is_ok_and(|v| self.is_value(&v)),
        }
    }

    /// From the JSON array of a header or batch operation, e.g. `["drone-42"]`, or `[{}]` for
    /// the undefined key.
    pub fn from_header(header: &str) -> Option<Self> {
        if let Some(inner) = header.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            if let Some(s) = raw::plain_str(inner.as_bytes()) {
                return Some(Self::of_plain_str(s));
            }
        }
        let values: Vec<Value> = serde_json::from_str(header).ok()?;
        match values.as_slice() {
            [Value::Object(o)] if o.is_empty() => Some(Self::undefined()),
            [v] => Some(Self::from_value(v)),
            _ => None,
        }
    }
}

/// The EPK of a canonical key: hash v2 of the string for string keys, of the undefined key for
/// the empty name; other values are hashed as their JSON text (the service hashes numbers and
/// booleans differently).
pub fn pk_epk_of_canonical(canonical: &str) -> u128 {
    if canonical.is_empty() {
        return epk_u128_of_undefined();
    }
    match serde_json::from_str::<Value>(canonical) {
        Ok(Value::String(s)) => epk_u128_of_str(&s),
        _ => epk_u128_of_str(canonical),
    }
}

/// The value at a document's partition key path.
fn key_of_document<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, seg| v.get(seg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn header_key_and_document_key_agree() {
        let a = PartitionKey::from_header(r#"["drone-42"]"#).unwrap();
        let b = PartitionKey::from_value(&json!("drone-42"));
        assert_eq!(a, b);
        assert_eq!(a.epk, cosmos_wire::epk::epk_u128_of_str("drone-42"));
        assert!(PartitionKey::from_header("drone-42").is_none());
        for v in [
            json!("drone-42"),
            json!("a\\nb"),
            json!("q\"x"),
            json!(123),
            json!("é"),
        ] {
            assert!(PartitionKey::from_value(&v).is_value(&v), "{v}");
        }
        assert!(!PartitionKey::from_value(&json!(123)).is_value(&json!("2")));
        assert!(!PartitionKey::from_value(&json!("\n")).is_value(&json!("\\n")));
        assert!(!a.is_value(&json!("drone-43")));
        assert!(PartitionKey::from_header(r#"["a","b"]"#).is_none());
    }

    #[test]
    fn undefined_key_is_its_own_logical_partition() {
        let u =
            PartitionKey::from_header(cosmos_wire::batch::UNDEFINED_PARTITION_KEY_JSON).unwrap();
        assert_eq!(u, PartitionKey::undefined());
        assert_eq!(u.epk, cosmos_wire::epk::epk_u128_of_undefined());
        assert_eq!(pk_epk_of_canonical(&u.canonical), u.epk);
        let path = vec!["deviceId".to_string()];
        let without = json!({"id": "a"});
        let with = json!({"id": "a", "deviceId": "d"});
        assert_eq!(PartitionKey::of_document(&without, &path), u);
        assert!(u.matches_document(&without, &path));
        assert!(!u.matches_document(&with, &path));
        let d = PartitionKey::from_value(&json!("d"));
        assert_eq!(PartitionKey::of_document(&with, &path), d);
        assert!(d.matches_document(&with, &path));
        assert!(!d.matches_document(&without, &path));
        for spelled in [json!(""), json!("{}"), json!({}), json!(null)] {
            assert_ne!(PartitionKey::from_value(&spelled), u, "{spelled}");
        }
    }
}

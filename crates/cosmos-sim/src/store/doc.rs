//! A stored document: its JSON text with the system properties, parsed only when read; and the
//! clock of its `_ts`.

use crate::raw::EtagText;
use serde_json::Value;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, the unit of `_ts`.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A stored document: its JSON with the system properties, as written to responses; parsed
/// only when a query or a patch reads it, and then kept parsed.
#[derive(Debug)]
pub struct Doc {
    json: Vec<u8>,
    etag: EtagText,
    /// Creation order in the container: the order of query results without `ORDER BY`.
    pub seq: u64,
    parsed: OnceLock<Value>,
}

impl Doc {
    /// A document from its JSON text (an object with its system properties).
    pub fn new(json: Vec<u8>, etag: EtagText, seq: u64) -> Self {
        Self {
            json,
            etag,
            seq,
            parsed: OnceLock::new(),
        }
    }

    /// A document whose parsed form is at hand; `json` must be `value` serialized.
    pub fn with_value(value: Value, json: Vec<u8>, etag: EtagText, seq: u64) -> Self {
        Self {
            parsed: OnceLock::from(value),
            ..Self::new(json, etag, seq)
        }
    }

    /// The JSON text: answered as is, and its length is what the RU model charges by.
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// The ETag (quoted, as in `_etag`).
    pub fn etag(&self) -> &str {
        self.etag.as_str()
    }

    /// The ETag's text.
    pub fn etag_text(&self) -> &EtagText {
        &self.etag
    }

    /// The document parsed, if it has been.
    pub fn parsed(&self) -> Option<&Value> {
        self.parsed.get()
    }

    /// Its `kind` member (the first in its text when not parsed), `""` without one.
    pub fn kind(&self) -> &str {
        if let Some(value) = self.parsed() {
            return value.get("kind").and_then(Value::as_str).unwrap_or("");
        }
        const KEY: &[u8] = b"\"kind\":\"";
        let Some(at) = self.json.windows(KEY.len()).position(|w| w == KEY) else {
            return "";
        };
        let rest = &self.json[at + KEY.len()..];
        let end = rest.iter().position(|b| *b == b'"').unwrap_or(0);
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    /// The document parsed (on first use).
    pub fn value(&self) -> &Value {
        self.parsed.get_or_init(|| {
            serde_json::from_slice(&self.json).expect("a stored document is valid JSON")
        })
    }
}

//! The partition key path of the positions container: its syntax (Cosmos DB's), and which
//! paths the documents can carry the device id at.

use std::fmt;
use std::str::FromStr;

use super::{AGENT_FIELDS, DEVICE_ID_FIELD, DOCUMENT_FIELDS, SEGMENT_FIELDS};

/// A partition key path such as `/deviceId` or `/fleet/deviceId`, at which documents carry
/// the device id.
///
/// Syntax (Cosmos DB's): `/` followed by segments separated by `/`; a segment is a plain
/// name, or a name in double quotes (which may then contain `/`, e.g. `/"a/b"`). Quoted
/// names cannot contain `"`; wildcards (`*`, `?`, `[]`) are not paths of a single value.
/// Equality compares the segments, so `/"fleet"/deviceId` equals `/fleet/deviceId`.
#[derive(Debug, Clone)]
pub struct PartitionKeyPath {
    text: String,
    segments: Vec<String>,
}

/// Why a string is not a usable partition key path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionKeyPathError {
    /// The path does not start with `/`.
    #[error("partition key path '{path}' must start with '/', e.g. /deviceId")]
    NoLeadingSlash {
        /// The rejected path.
        path: String,
    },
    /// A segment is empty (`//`, a trailing `/`, or `""`).
    #[error("partition key path '{path}' has an empty segment")]
    EmptySegment {
        /// The rejected path.
        path: String,
    },
    /// A quoted segment has no closing quote, or text follows its closing quote.
    #[error("partition key path '{path}' has a malformed quoted segment")]
    Quote {
        /// The rejected path.
        path: String,
    },
    /// An unquoted segment holds a character that is not allowed there.
    #[error("partition key path '{path}' contains {ch:?}; quote the segment or use another name")]
    Character {
        /// The rejected path.
        path: String,
        /// The offending character.
        ch: char,
    },
    /// The path starts with a name the documents already use for something else.
    #[error(
        "partition key path '{path}' starts with {field:?}, which the telemetry documents use for other data; use /deviceId or a path under another name, e.g. /pk/deviceId"
    )]
    Reserved {
        /// The rejected path.
        path: String,
        /// The clashing document field.
        field: String,
    },
}

impl PartitionKeyPath {
    /// The path's segments (quotes removed).
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// Whether this is the document's own `/deviceId` field.
    pub fn is_device_id_field(&self) -> bool {
        self.segments.len() == 1 && self.segments[0] == DEVICE_ID_FIELD
    }
}

impl Default for PartitionKeyPath {
    fn default() -> Self {
        PartitionKeyPath {
            text: format!("/{DEVICE_ID_FIELD}"),
            segments: vec![DEVICE_ID_FIELD.to_owned()],
        }
    }
}

impl PartialEq for PartitionKeyPath {
    fn eq(&self, other: &Self) -> bool {
        self.segments == other.segments
    }
}

impl Eq for PartitionKeyPath {}

impl fmt::Display for PartitionKeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for PartitionKeyPath {
    type Err = PartitionKeyPathError;

    fn from_str(path: &str) -> Result<Self, Self::Err> {
        let owned = || path.to_owned();
        let mut rest = path
            .strip_prefix('/')
            .ok_or_else(|| PartitionKeyPathError::NoLeadingSlash { path: owned() })?;
        let mut segments = Vec::new();
        loop {
            let (segment, after) = if let Some(quoted) = rest.strip_prefix('"') {
                let end = quoted
                    .find('"')
                    .ok_or_else(|| PartitionKeyPathError::Quote { path: owned() })?;
                let after = &quoted[end + 1..];
                if !(after.is_empty() || after.starts_with('/')) {
                    return Err(PartitionKeyPathError::Quote { path: owned() });
                }
                (&quoted[..end], after)
            } else {
                let end = rest.find('/').unwrap_or(rest.len());
                let segment = &rest[..end];
                if let Some(ch) = segment
                    .chars()
                    .find(|c| matches!(c, '"' | '*' | '?' | '[' | ']'))
                {
                    return Err(PartitionKeyPathError::Character { path: owned(), ch });
                }
                (segment, &rest[end..])
            };
            if segment.is_empty() {
                return Err(PartitionKeyPathError::EmptySegment { path: owned() });
            }
            segments.push(segment.to_owned());
            match after.strip_prefix('/') {
                Some(next) => rest = next,
                None => break,
            }
        }
        let first = segments[0].as_str();
        let own_field = segments.len() == 1 && first == DEVICE_ID_FIELD;
        let used = DOCUMENT_FIELDS.contains(&first)
            || AGENT_FIELDS.contains(&first)
            || SEGMENT_FIELDS.contains(&first);
        if !own_field && (first.starts_with('_') || used) {
            return Err(PartitionKeyPathError::Reserved {
                path: owned(),
                field: first.to_owned(),
            });
        }
        Ok(PartitionKeyPath {
            text: owned(),
            segments,
        })
    }
}

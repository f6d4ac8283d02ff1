//! The Cosmos DB documents built from positions, and the partition key path they carry.
//!
//! Owns the document format: the "latest" document (one per drone, `id` = device id, the
//! drone's newest position) and the "history" document (one per position,
//! `id` = `{deviceId}:{seq}`, optional `ttl`), and [`PartitionKeyPath`].
//!
//! ```json
//! {"id":"drone-0042","deviceId":"drone-0042","kind":"latest","schemaVersion":1,"seq":1834,
//!  "deviceTime":"2026-11-22T09:15:02.500Z","deviceTimeMs":1795338902500,
//!  "enqueuedTime":"2026-11-22T09:15:03.100Z","enqueuedTimeMs":1795338903100,
//!  "location":{"type":"Point","coordinates":[-122.3493,47.6205]},
//!  "altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81}
//! ```
//!
//! - `location` is a GeoJSON Point, longitude first. It is written by this module as
//!   exactly `{"type":"Point","coordinates":[lon,lat]}` (the `geojson` crate is not used:
//!   the output is the same and needs no allocation).
//! - `deviceTime`/`enqueuedTime` are RFC 3339 strings; `deviceTimeMs`/`enqueuedTimeMs` the
//!   same instants in Unix milliseconds, for numeric comparison in queries and conditions.
//!   The enqueued pair is present only when the source knows the hub's enqueued time.
//! - Optional position fields are left out when the position lacks them.
//! - The device id is also written at the layout's partition key path (default
//!   `/deviceId`, which the document has anyway; `/fleet/deviceId` adds
//!   `"fleet":{"deviceId":"..."}`).
//! - Cosmos DB forbids `/`, `\`, `?` and `#` in ids, and IoT Hub allows `?` and `#` in
//!   device ids. [`document_id`] therefore writes `%` as `%25`, `#` as `%23` and `?` as
//!   `%3F` (a reversible escape); every other device id is its own document id.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::time::MillisTime;
use crate::wire::Position;

/// The version of the document format, written as `schemaVersion`.
pub const DOCUMENT_SCHEMA_VERSION: u32 = 1;

/// The field of the document that always holds the device id, and the default partition key.
pub const DEVICE_ID_FIELD: &str = "deviceId";

/// Top-level names the documents use (besides Cosmos system properties, which start
/// with `_`). A partition key path may not start with one of them, except `/deviceId`
/// itself, or its value would clash with the document's own field.
pub const DOCUMENT_FIELDS: [&str; 15] = [
    "id",
    "deviceId",
    "kind",
    "schemaVersion",
    "seq",
    "deviceTime",
    "deviceTimeMs",
    "enqueuedTime",
    "enqueuedTimeMs",
    "location",
    "altM",
    "headingDeg",
    "speedMps",
    "batteryPct",
    "ttl",
];

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
        if !own_field && (first.starts_with('_') || DOCUMENT_FIELDS.contains(&first)) {
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

/// The Cosmos DB document id of a device: the device id, with `%`, `#` and `?` (allowed
/// by IoT Hub, but `#` and `?` not by Cosmos DB) percent-escaped. Borrows when nothing
/// needs escaping, which is the usual case.
pub fn document_id(device_id: &str) -> Cow<'_, str> {
    if !device_id.contains(['%', '#', '?']) {
        return Cow::Borrowed(device_id);
    }
    let mut id = String::with_capacity(device_id.len() + 8);
    for ch in device_id.chars() {
        match ch {
            '%' => id.push_str("%25"),
            '#' => id.push_str("%23"),
            '?' => id.push_str("%3F"),
            other => id.push(other),
        }
    }
    Cow::Owned(id)
}

/// The id of the history document of position `seq` of a device: `{document_id}:{seq}`.
pub fn history_id(device_id: &str, seq: u64) -> String {
    HistoryId { device_id, seq }.to_string()
}

/// How documents are laid out in the container: where the partition key value goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocumentLayout {
    pk_path: PartitionKeyPath,
}

impl DocumentLayout {
    /// A layout writing the device id at `pk_path` (and, always, at `/deviceId`).
    pub fn new(pk_path: PartitionKeyPath) -> Self {
        DocumentLayout { pk_path }
    }

    /// The partition key path the documents carry the device id at.
    pub fn partition_key_path(&self) -> &PartitionKeyPath {
        &self.pk_path
    }

    /// Whether documents of this layout hold the device id (the partition key value a
    /// writer sends) at `container_path`. A writer should refuse to start when this is
    /// false for its container's partition key path: every document would otherwise land
    /// in one logical partition.
    pub fn carries(&self, container_path: &PartitionKeyPath) -> bool {
        container_path.is_device_id_field() || *container_path == self.pk_path
    }

    /// The latest-position document of the drone (`id` = [`document_id`]), as a JSON value.
    ///
    /// `pos` must be valid ([`Position::validate`]; [`crate::wire::decode`] returns only
    /// valid positions): JSON cannot hold NaN, which would be written as `null`.
    pub fn latest(&self, pos: &Position, enqueued: Option<DateTime<Utc>>) -> serde_json::Value {
        to_value(&self.body(pos, enqueued, Kind::Latest))
    }

    /// The history document of this position (`id` = [`history_id`]), with `ttl` in
    /// seconds when given. Same precondition as [`DocumentLayout::latest`].
    pub fn history(
        &self,
        pos: &Position,
        enqueued: Option<DateTime<Utc>>,
        ttl: Option<u32>,
    ) -> serde_json::Value {
        to_value(&self.body(pos, enqueued, Kind::History { ttl }))
    }

    /// Appends the latest-position document's JSON to `out` (same content as
    /// [`DocumentLayout::latest`], no intermediate value).
    pub fn write_latest(&self, pos: &Position, enqueued: Option<DateTime<Utc>>, out: &mut Vec<u8>) {
        write(out, &self.body(pos, enqueued, Kind::Latest));
    }

    /// Appends the history document's JSON to `out` (same content as
    /// [`DocumentLayout::history`]).
    pub fn write_history(
        &self,
        pos: &Position,
        enqueued: Option<DateTime<Utc>>,
        ttl: Option<u32>,
        out: &mut Vec<u8>,
    ) {
        write(out, &self.body(pos, enqueued, Kind::History { ttl }));
    }

    fn body<'a>(
        &'a self,
        pos: &'a Position,
        enqueued: Option<DateTime<Utc>>,
        kind: Kind,
    ) -> Body<'a> {
        debug_assert!(pos.validate().is_ok(), "documents need a valid position");
        Body {
            layout: self,
            pos,
            enqueued,
            kind,
        }
    }
}

fn to_value(body: &Body<'_>) -> serde_json::Value {
    serde_json::to_value(body).expect("a document body always serializes")
}

fn write(out: &mut Vec<u8>, body: &Body<'_>) {
    serde_json::to_writer(out, body).expect("writing JSON into a Vec cannot fail");
}

/// Which of the two documents to build.
#[derive(Clone, Copy)]
enum Kind {
    Latest,
    History { ttl: Option<u32> },
}

/// A document, borrowing everything; serializes in one pass.
struct Body<'a> {
    layout: &'a DocumentLayout,
    pos: &'a Position,
    enqueued: Option<DateTime<Utc>>,
    kind: Kind,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let pos = self.pos;
        let mut map = serializer.serialize_map(None)?;
        match self.kind {
            Kind::Latest => map.serialize_entry("id", &document_id(&pos.device_id))?,
            Kind::History { .. } => map.serialize_entry(
                "id",
                &HistoryId {
                    device_id: &pos.device_id,
                    seq: pos.seq,
                },
            )?,
        }
        map.serialize_entry(DEVICE_ID_FIELD, &pos.device_id)?;
        let pk = self.layout.pk_path.segments();
        if let [first, rest @ ..] = pk {
            if !self.layout.pk_path.is_device_id_field() {
                map.serialize_entry(
                    first,
                    &Nested {
                        segments: rest,
                        value: &pos.device_id,
                    },
                )?;
            }
        }
        let kind = match self.kind {
            Kind::Latest => "latest",
            Kind::History { .. } => "history",
        };
        map.serialize_entry("kind", kind)?;
        map.serialize_entry("schemaVersion", &DOCUMENT_SCHEMA_VERSION)?;
        map.serialize_entry("seq", &pos.seq)?;
        map.serialize_entry("deviceTime", &MillisTime(pos.ts))?;
        map.serialize_entry("deviceTimeMs", &pos.ts.timestamp_millis())?;
        if let Some(enqueued) = self.enqueued {
            map.serialize_entry("enqueuedTime", &MillisTime(enqueued))?;
            map.serialize_entry("enqueuedTimeMs", &enqueued.timestamp_millis())?;
        }
        map.serialize_entry(
            "location",
            &GeoPoint {
                kind: "Point",
                coordinates: [pos.lon, pos.lat],
            },
        )?;
        for (field, value) in [
            ("altM", pos.alt_m),
            ("headingDeg", pos.heading_deg),
            ("speedMps", pos.speed_mps),
        ] {
            if let Some(value) = value {
                map.serialize_entry(field, &value)?;
            }
        }
        if let Some(pct) = pos.battery_pct {
            map.serialize_entry("batteryPct", &pct)?;
        }
        if let Kind::History { ttl: Some(ttl) } = self.kind {
            map.serialize_entry("ttl", &ttl)?;
        }
        map.end()
    }
}

/// A GeoJSON Point: `{"type":"Point","coordinates":[lon,lat]}`.
#[derive(Serialize)]
struct GeoPoint {
    #[serde(rename = "type")]
    kind: &'static str,
    coordinates: [f64; 2],
}

/// `{document_id}:{seq}`, written without an intermediate string.
struct HistoryId<'a> {
    device_id: &'a str,
    seq: u64,
}

impl fmt::Display for HistoryId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", document_id(self.device_id), self.seq)
    }
}

impl Serialize for HistoryId<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The device id nested under the remaining segments of the partition key path.
struct Nested<'a> {
    segments: &'a [String],
    value: &'a str,
}

impl Serialize for Nested<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.segments {
            [] => serializer.serialize_str(self.value),
            [first, rest @ ..] => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry(
                    first,
                    &Nested {
                        segments: rest,
                        value: self.value,
                    },
                )?;
                map.end()
            }
        }
    }
}

//! The in-memory account: databases, containers, their partition key ranges (each one physical
//! partition with its own documents, RU budget and counters), and splitting a range in two.
//!
//! Every physical partition sits behind its own mutex, so that requests on different
//! partitions never wait on each other and a batch takes its partition's lock once.

use crate::raw::{self, EtagText};
use crate::ru::Bucket;
use cosmos_wire::epk::{
    boundary_to_u128, epk_u128_of_str, epk_u128_of_undefined, even_ranges, u128_to_boundary,
};
use cosmos_wire::resources::{PartitionKeyDefinition, PartitionKeyRange};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds of per-second RU history kept per partition.
const HISTORY_SECONDS: usize = 300;

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

    /// The document parsed (on first use).
    pub fn value(&self) -> &Value {
        self.parsed.get_or_init(|| {
            serde_json::from_slice(&self.json).expect("a stored document is valid JSON")
        })
    }
}

/// The documents of one logical partition, by id.
pub type LogicalPartition = FxHashMap<String, Arc<Doc>>;

/// A physical partition's mutable state.
#[derive(Debug)]
pub struct Partition {
    /// Documents by partition key (canonical JSON of the value), then by id.
    pub docs: FxHashMap<String, LogicalPartition>,
    /// The RU budget.
    pub bucket: Bucket,
    /// Counters for the heat map.
    pub counters: Counters,
}

/// What a partition has served.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// RU charged in total.
    pub ru_total: f64,
    /// Operations served (successful or not, not counting throttled ones).
    pub operations: u64,
    /// Operations answered 429.
    pub throttled: u64,
    /// RU charged per second, as `(unix second, RU)`, oldest first.
    pub history: VecDeque<(u64, f64)>,
}

impl Counters {
    /// Records an operation and its charge.
    pub fn charge(&mut self, ru: f64) {
        self.ru_total += ru;
        self.operations += 1;
        let now = unix_now();
        match self.history.back_mut() {
            Some((sec, total)) if *sec == now => *total += ru,
            _ => {
                self.history.push_back((now, ru));
                if self.history.len() > HISTORY_SECONDS {
                    self.history.pop_front();
                }
            }
        }
    }
}

impl Partition {
    fn new(rate: f64) -> Self {
        Self {
            docs: FxHashMap::default(),
            bucket: Bucket::new(rate),
            counters: Counters::default(),
        }
    }

    /// Number of documents.
    pub fn document_count(&self) -> usize {
        self.docs.values().map(|p| p.len()).sum()
    }
}

/// A partition key range: one physical partition.
#[derive(Debug)]
pub struct Range {
    /// The range id.
    pub id: String,
    /// Lowest EPK.
    pub min: u128,
    /// EPK past the range.
    pub max: u128,
    /// Ranges this one was split from.
    pub parents: Vec<String>,
    /// Documents, budget, counters.
    pub part: Mutex<Partition>,
}

impl Range {
    /// Whether an EPK belongs here.
    pub fn contains(&self, epk: u128) -> bool {
        self.min <= epk && epk < self.max
    }

    /// The wire form.
    pub fn to_wire(&self) -> PartitionKeyRange {
        PartitionKeyRange {
            id: self.id.clone(),
            min_inclusive: u128_to_boundary(self.min),
            max_exclusive: u128_to_boundary(self.max),
            parents: self.parents.clone(),
        }
    }
}

/// The ranges of a container: the live ones, ordered by EPK, and the ids split away.
#[derive(Debug, Default)]
pub struct Ranges {
    /// Live ranges, ordered by `min`.
    pub live: Vec<Arc<Range>>,
    /// Ranges split away (they answer 410/1002), kept for their counters.
    pub gone: Vec<Arc<Range>>,
    next_id: u64,
}

impl Ranges {
    /// The live range that holds an EPK.
    pub fn for_epk(&self, epk: u128) -> Arc<Range> {
        let i = self.live.partition_point(|r| r.max <= epk);
        self.live[i.min(self.live.len() - 1)].clone()
    }

    /// A live range by id, or `Err(true)` if it was split away, `Err(false)` if unknown.
    pub fn by_id(&self, id: &str) -> Result<Arc<Range>, bool> {
        if let Some(r) = self.live.iter().find(|r| r.id == id) {
            return Ok(r.clone());
        }
        Err(self.gone.iter().any(|r| r.id == id))
    }
}

/// A container.
#[derive(Debug)]
pub struct Container {
    /// Its name.
    pub id: String,
    /// Its resource id.
    pub rid: String,
    /// The partition key definition.
    pub partition_key: PartitionKeyDefinition,
    /// The properties as returned (id, partitionKey, indexingPolicy, system properties).
    pub body: Value,
    /// The partition key path split into its segments.
    pub pk_path: Vec<String>,
    /// `dbs/{db rid}/colls/{rid}/`.
    self_link: String,
    /// Provisioned RU/s (f64 bits), split evenly across the live ranges.
    ru_per_sec: AtomicU64,
    /// The ranges.
    pub ranges: RwLock<Ranges>,
    next_doc: AtomicU64,
}

impl Container {
    /// Provisioned RU/s.
    pub fn ru_per_sec(&self) -> f64 {
        f64::from_bits(self.ru_per_sec.load(Ordering::Relaxed))
    }

    /// Changes the provisioned RU/s; every live range gets an even share.
    pub fn set_ru_per_sec(&self, ru: f64) {
        self.ru_per_sec.store(ru.to_bits(), Ordering::Relaxed);
        let ranges = self.ranges.read();
        let share = ru / ranges.live.len() as f64;
        for r in &ranges.live {
            r.part.lock().bucket.set_rate(share);
        }
    }

    /// `dbs/{db rid}/colls/{rid}/`, the prefix of its documents' `_self`.
    pub fn self_link(&self) -> &str {
        &self.self_link
    }

    /// A fresh document resource id.
    pub fn next_doc_rid(&self) -> u64 {
        self.next_doc.fetch_add(1, Ordering::Relaxed)
    }

    /// Splits a live range at its EPK midpoint into two children that share its documents; the
    /// old id then answers 410/1002. Returns the children, or `None` if the id is not live or
    /// the range is too narrow.
    pub fn split(&self, range_id: &str) -> Option<(PartitionKeyRange, PartitionKeyRange)> {
        let mut ranges = self.ranges.write();
        let pos = ranges.live.iter().position(|r| r.id == range_id)?;
        let old = ranges.live[pos].clone();
        let mid = old.min + (old.max - old.min) / 2;
        if mid <= old.min || mid >= old.max {
            return None;
        }
        let share = self.ru_per_sec() / (ranges.live.len() + 1) as f64;
        let mut make = |min, max| {
            let id = ranges.next_id.to_string();
            ranges.next_id += 1;
            Arc::new(Range {
                id,
                min,
                max,
                parents: vec![old.id.clone()],
                part: Mutex::new(Partition::new(share)),
            })
        };
        let (left, right) = (make(old.min, mid), make(mid, old.max));
        {
            let mut from = old.part.lock();
            let (mut l, mut r) = (left.part.lock(), right.part.lock());
            for (pk, docs) in from.docs.drain() {
                let target = if left.contains(pk_epk_of_canonical(&pk)) {
                    &mut l
                } else {
                    &mut r
                };
                target.docs.insert(pk, docs);
            }
        }
        let wire = (left.to_wire(), right.to_wire());
        ranges.live.splice(pos..=pos, [left, right]);
        ranges.gone.push(old);
        for r in &ranges.live {
            r.part.lock().bucket.set_rate(share);
        }
        Some(wire)
    }
}

/// A database.
#[derive(Debug)]
pub struct Database {
    /// Its name.
    pub id: String,
    /// Its resource id.
    pub rid: String,
    /// The properties as returned.
    pub body: Value,
    /// Containers by name.
    pub containers: RwLock<BTreeMap<String, Arc<Container>>>,
}

/// All databases of the account.
#[derive(Debug, Default)]
pub struct Store {
    /// Databases by name.
    pub databases: RwLock<BTreeMap<String, Arc<Database>>>,
    next_rid: AtomicU64,
    etag: AtomicU64,
}

/// Why a database or container could not be created.
#[derive(Debug, PartialEq, Eq)]
pub enum CreateError {
    /// The name is taken.
    Conflict,
    /// The database does not exist.
    NotFound,
    /// The definition is not acceptable; the message says why.
    Invalid(String),
}

impl Store {
    /// A new ETag (quoted), unique in the account.
    pub fn next_etag(&self) -> String {
        self.next_etag_text().as_str().to_string()
    }

    /// A new ETag as its fixed-size text, without allocating.
    pub fn next_etag_text(&self) -> EtagText {
        EtagText::new(self.etag.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn next_rid(&self) -> u64 {
        self.next_rid.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A database by name.
    pub fn database(&self, id: &str) -> Option<Arc<Database>> {
        self.databases.read().get(id).cloned()
    }

    /// A container by database and container name.
    pub fn container(&self, db: &str, coll: &str) -> Option<Arc<Container>> {
        self.database(db)?.containers.read().get(coll).cloned()
    }

    /// Creates a database.
    pub fn create_database(&self, id: &str) -> Result<Arc<Database>, CreateError> {
        validate_name(id)?;
        let mut dbs = self.databases.write();
        if dbs.contains_key(id) {
            return Err(CreateError::Conflict);
        }
        let rid = rid_string(self.next_rid() << 32);
        let body = json!({
            "id": id, "_rid": rid, "_self": format!("dbs/{rid}/"), "_etag": self.next_etag(),
            "_colls": "colls/", "_users": "users/", "_ts": unix_now(),
        });
        let db = Arc::new(Database {
            id: id.to_string(),
            rid,
            body,
            containers: RwLock::new(BTreeMap::new()),
        });
        dbs.insert(id.to_string(), db.clone());
        Ok(db)
    }

    /// Creates a container from its JSON definition with `partitions` ranges sharing `ru_per_sec`.
    pub fn create_container(
        &self,
        db: &str,
        definition: &Value,
        partitions: usize,
        ru_per_sec: f64,
    ) -> Result<Arc<Container>, CreateError> {
        let database = self.database(db).ok_or(CreateError::NotFound)?;
        let id = definition
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| CreateError::Invalid("the container has no string \"id\"".into()))?;
        validate_name(id)?;
        let mut partition_key: PartitionKeyDefinition = definition
            .get("partitionKey")
            .cloned()
            .ok_or_else(|| {
                CreateError::Invalid(
                    "the container has no \"partitionKey\" definition (e.g. {\"paths\":[\"/deviceId\"],\"kind\":\"Hash\",\"version\":2})".into(),
                )
            })
            .and_then(|v| {
                serde_json::from_value(v).map_err(|e| {
                    CreateError::Invalid(format!("invalid partitionKey definition: {e}"))
                })
            })?;
        if partition_key.paths.len() != 1 || partition_key.kind != "Hash" {
            return Err(CreateError::Invalid(
                "the partition key must be kind Hash with exactly one path".into(),
            ));
        }
        // Only hash version 2 is implemented; a definition without a version gets it.
        match partition_key.version {
            None | Some(2) => partition_key.version = Some(2),
            Some(v) => {
                return Err(CreateError::Invalid(format!(
                    "partition key hash version {v} is not supported; use version 2"
                )));
            }
        }
        let pk_path: Vec<String> = partition_key.paths[0]
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if pk_path.is_empty() {
            return Err(CreateError::Invalid(
                "the partition key path is empty".into(),
            ));
        }
        let mut containers = database.containers.write();
        if containers.contains_key(id) {
            return Err(CreateError::Conflict);
        }
        let rid = rid_string((self.next_rid() << 32) | 1);
        let indexing_policy = definition
            .get("indexingPolicy")
            .cloned()
            .unwrap_or_else(|| {
                json!({"indexingMode":"consistent","automatic":true,
                   "includedPaths":[{"path":"/*"}],"excludedPaths":[{"path":"/\"_etag\"/?"}]})
            });
        let mut body = definition.clone();
        let obj = body.as_object_mut().ok_or_else(|| {
            CreateError::Invalid("the container definition is not an object".into())
        })?;
        obj.insert(
            "partitionKey".into(),
            serde_json::to_value(&partition_key).expect("serializable"),
        );
        obj.insert("indexingPolicy".into(), indexing_policy);
        obj.entry("geospatialConfig")
            .or_insert(json!({"type":"Geography"}));
        obj.insert("_rid".into(), json!(rid));
        let self_link = format!("dbs/{}/colls/{rid}/", database.rid);
        obj.insert("_self".into(), json!(self_link));
        obj.insert("_etag".into(), json!(self.next_etag()));
        obj.insert("_ts".into(), json!(unix_now()));
        for (k, v) in [
            ("_docs", "docs/"),
            ("_sprocs", "sprocs/"),
            ("_triggers", "triggers/"),
            ("_udfs", "udfs/"),
            ("_conflicts", "conflicts/"),
        ] {
            obj.insert(k.into(), json!(v));
        }
        let partitions = partitions.max(1);
        let share = ru_per_sec / partitions as f64;
        let live = even_ranges(partitions)
            .into_iter()
            .enumerate()
            .map(|(i, (lo, hi))| {
                Arc::new(Range {
                    id: i.to_string(),
                    min: boundary_to_u128(&lo).expect("even_ranges gives valid boundaries"),
                    max: boundary_to_u128(&hi).expect("even_ranges gives valid boundaries"),
                    parents: Vec::new(),
                    part: Mutex::new(Partition::new(share)),
                })
            })
            .collect();
        let container = Arc::new(Container {
            id: id.to_string(),
            rid,
            partition_key,
            body,
            pk_path,
            self_link,
            ru_per_sec: AtomicU64::new(ru_per_sec.to_bits()),
            ranges: RwLock::new(Ranges {
                live,
                gone: Vec::new(),
                next_id: partitions as u64,
            }),
            next_doc: AtomicU64::new(1),
        });
        containers.insert(id.to_string(), container.clone());
        Ok(container)
    }
}

fn validate_name(id: &str) -> Result<(), CreateError> {
    if id.is_empty() || id.len() > 255 || id.contains(['/', '\\', '?', '#']) || id.ends_with(' ') {
        return Err(CreateError::Invalid(format!(
            "invalid name {id:?}: 1 to 255 characters, none of '/', '\\\\', '?', '#', no trailing space"
        )));
    }
    Ok(())
}

/// A resource id rendered like the service's (base64 of the number's bytes).
fn rid_string(n: u64) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for b in n.to_be_bytes() {
        let _ = write!(s, "{b:02x}");
    }
    s
}

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
fn pk_epk_of_canonical(canonical: &str) -> u128 {
    if canonical.is_empty() {
        return epk_u128_of_undefined();
    }
    match serde_json::from_str::<Value>(canonical) {
        Ok(Value::String(s)) => epk_u128_of_str(&s),
        _ => epk_u128_of_str(canonical),
    }
}

/// The value at a document's partition key path.
pub fn key_of_document<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, seg| v.get(seg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(store: &Store, partitions: usize) -> Arc<Container> {
        store.create_database("db").unwrap();
        store
            .create_container(
                "db",
                &json!({"id":"c","partitionKey":{"paths":["/deviceId"],"kind":"Hash"}}),
                partitions,
                1000.0,
            )
            .unwrap()
    }

    #[test]
    fn container_gets_even_ranges_and_version_2() {
        let store = Store::default();
        let c = container(&store, 4);
        assert_eq!(c.partition_key.version, Some(2));
        let ranges = c.ranges.read();
        assert_eq!(ranges.live.len(), 4);
        assert_eq!(ranges.live[0].min, 0);
        assert_eq!(ranges.live[3].max, cosmos_wire::epk::EPK_SPACE_END);
        assert_eq!(ranges.live[0].part.lock().bucket.rate(), 250.0);
        assert_eq!(
            store.create_database("db").unwrap_err(),
            CreateError::Conflict
        );
    }

    #[test]
    fn split_moves_documents_by_epk_and_retires_the_old_id() {
        let store = Store::default();
        let c = container(&store, 1);
        {
            let ranges = c.ranges.read();
            let mut part = ranges.live[0].part.lock();
            for i in 0..200 {
                let key = PartitionKey::from_value(&json!(format!("drone-{i}")));
                part.docs.entry(key.canonical).or_default();
            }
        }
        let (l, r) = c.split("0").unwrap();
        assert_eq!(l.parents, vec!["0".to_string()]);
        assert_eq!(l.max_exclusive, r.min_inclusive);
        let ranges = c.ranges.read();
        assert!(ranges.by_id("0").unwrap_err());
        let (a, b) = (ranges.live[0].part.lock(), ranges.live[1].part.lock());
        assert_eq!(a.docs.len() + b.docs.len(), 200);
        assert!(a.docs.len() > 50 && b.docs.len() > 50);
        for pk in a.docs.keys() {
            assert!(ranges.live[0].contains(pk_epk_of_canonical(pk)));
        }
        assert_eq!(a.bucket.rate(), 500.0);
    }

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

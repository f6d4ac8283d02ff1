//! The in-memory account: databases, containers, their partition key ranges (each one physical
//! partition with its own documents, RU budget and counters), and splitting a range in two.
//!
//! Every physical partition sits behind its own mutex, so that requests on different
//! partitions never wait on each other and a batch takes its partition's lock once.
//!
//! This module holds the account itself: its databases, and creating them and their
//! containers.

mod container;
mod doc;
mod key;
mod partition;

pub use container::{Container, Range, Ranges};
pub use doc::{Doc, unix_now};
pub use key::{PartitionKey, pk_epk_of_canonical};
pub use partition::Partition;

use crate::raw::EtagText;
use cosmos_wire::indexing::IndexingPolicy;
use cosmos_wire::resources::PartitionKeyDefinition;
use parking_lot::RwLock;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

    /// The number of the last ETag given out: every later write gets a greater one.
    pub fn last_etag_number(&self) -> u64 {
        self.etag.load(Ordering::Relaxed)
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

    /// Removes a container and its documents; `None` if there is no such container.
    pub fn delete_container(&self, db: &str, coll: &str) -> Option<Arc<Container>> {
        self.database(db)?.containers.write().remove(coll)
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
            .unwrap_or_else(cosmos_wire::indexing::default_policy);
        let indexing = IndexingPolicy::parse(&indexing_policy)
            .map_err(|e| CreateError::Invalid(format!("The indexing policy is invalid: {e}.")))?;
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
        let container = Arc::new(Container {
            id: id.to_string(),
            rid,
            partition_key,
            body,
            pk_path,
            indexing,
            self_link,
            ru_per_sec: AtomicU64::new(ru_per_sec.to_bits()),
            ranges: RwLock::new(Ranges::even(partitions, ru_per_sec)),
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

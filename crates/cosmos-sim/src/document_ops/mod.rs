//! Document operations on one physical partition: create, upsert, replace, read, delete and
//! conditional patch, with ETag preconditions, RU charges and throttling; and the
//! all-or-nothing execution of a transactional batch.
//!
//! Each operation is first *decided* against the current document (status, charge, effect),
//! then charged to the partition's budget, then applied: a throttled operation changes nothing.

use crate::raw::{self, EtagText, Fields};
use crate::ru;
use crate::store::{Container, Doc, Partition, PartitionKey, Store, unix_now};
use cosmos_wire::priority::Priority;
use cosmos_wire::status::SUB_RU_BUDGET_EXCEEDED;
use rustc_hash::FxHashMap;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

mod conditional_patch;

pub use conditional_patch::Patch;

/// What an operation does.
#[derive(Debug, Clone)]
pub enum DocOp<'a> {
    /// Create; 409 if the id exists.
    Create(NewDoc<'a>),
    /// Create or overwrite.
    Upsert(NewDoc<'a>),
    /// Overwrite; 404 if absent.
    Replace(NewDoc<'a>),
    /// Read.
    Read,
    /// Delete.
    Delete,
    /// Partial update, optionally conditional.
    Patch(Patch<'a>),
}

impl DocOp<'_> {
    /// Whether it changes the document.
    pub fn is_write(&self) -> bool {
        !matches!(self, Self::Read)
    }
}

/// A document to store, as it came in.
#[derive(Debug, Clone)]
pub enum NewDoc<'a> {
    /// The JSON text of an object without system properties (read by [`raw::document`]): stored
    /// with them appended, never parsed.
    Raw(&'a [u8]),
    /// A parsed object; system properties it carries are replaced.
    Value(Value),
}

/// ETag preconditions.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    /// Apply only if the current ETag is this.
    pub if_match: Option<String>,
    /// Read: 304 if the current ETag is this; write: `*` means only if absent.
    pub if_none_match: Option<String>,
}

/// One operation, addressed.
#[derive(Debug, Clone)]
pub struct Addressed<'a> {
    /// Document id.
    pub id: String,
    /// Logical partition.
    pub pk: PartitionKey,
    /// What to do.
    pub op: DocOp<'a>,
    /// Preconditions.
    pub pre: Preconditions,
}

/// The result of one operation.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// HTTP status.
    pub status: u16,
    /// Substatus (0: none).
    pub substatus: u32,
    /// RU charged.
    pub charge: f64,
    /// The document to return (reads and writes).
    pub doc: Option<Arc<Doc>>,
    /// Error message.
    pub message: Option<String>,
    /// On 429: when to retry.
    pub retry_after: Option<Duration>,
}

impl Outcome {
    /// A failure.
    pub fn error(status: u16, substatus: u32, charge: f64, message: impl Into<String>) -> Self {
        Self {
            status,
            substatus,
            charge,
            doc: None,
            message: Some(message.into()),
            retry_after: None,
        }
    }

    /// A 429 for a spent budget.
    pub fn throttled(wait: Duration) -> Self {
        Self {
            retry_after: Some(wait),
            ..Self::error(
                429,
                SUB_RU_BUDGET_EXCEEDED,
                0.0,
                "Request rate is large. More Request Units may be needed, so no changes were made. Please retry this request later.",
            )
        }
    }

    fn ok(status: u16, charge: f64, doc: Option<Arc<Doc>>) -> Self {
        Self {
            status,
            substatus: 0,
            charge,
            doc,
            message: None,
            retry_after: None,
        }
    }

    /// Whether the status is 2xx (or 304).
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status) || self.status == 304
    }
}

enum Effect {
    None,
    Put(Arc<Doc>),
    Remove,
}

/// The document an operation's charge is counted under: the one it writes, or the one it
/// read, deleted or failed on.
fn charged_document(effect: &Effect, existing: Option<&Arc<Doc>>) -> Option<Arc<Doc>> {
    match effect {
        Effect::Put(doc) => Some(doc.clone()),
        Effect::None | Effect::Remove => existing.cloned(),
    }
}

/// Where new documents get their system properties.
pub struct Ctx<'a> {
    /// The account (ETags).
    pub store: &'a Store,
    /// The container (`_rid`, `_self`, key path).
    pub container: &'a Container,
    /// The `_ts` of documents written by this request.
    pub ts: u64,
    /// The largest document body written, in bytes (413 beyond).
    pub max_document_bytes: usize,
    /// The request's priority: which share of the budget it may draw.
    pub priority: Priority,
}

/// The 412 of a precondition (an ETag, a patch's condition) that does not hold.
fn precondition_failed(charge: f64) -> Outcome {
    Outcome::error(
        412,
        0,
        charge,
        "One of the specified pre-condition is not met.",
    )
}

/// The 400 of a document whose key is not the one the request names.
fn key_mismatch() -> Outcome {
    Outcome::error(
        400,
        1001,
        0.0,
        "PartitionKey extracted from document doesn't match the one specified in the header.",
    )
}

/// The 400 of a document without a string id.
fn missing_id() -> Outcome {
    Outcome::error(
        400,
        0,
        0.0,
        "The input content is invalid because the required property, id, is missing or not a string.",
    )
}

/// Checks that a document id is one the service accepts.
fn check_id(id: &str) -> Result<(), Outcome> {
    if id.is_empty() || id.contains(['/', '\\', '?', '#']) {
        return Err(Outcome::error(
            400,
            0,
            0.0,
            format!(
                "The id {id:?} is invalid: it must be 1 to 255 characters without '/', '\\\\', '?', '#'."
            ),
        ));
    }
    Ok(())
}

/// A document checked for writing: what to store, its id and its partition key.
#[derive(Debug)]
pub struct Checked<'a> {
    /// The document.
    pub doc: NewDoc<'a>,
    /// Its id.
    pub id: String,
    /// Its logical partition.
    pub pk: PartitionKey,
}

impl<'a> Ctx<'a> {
    /// A context for one request on a container, its writes stamped now.
    pub fn new(store: &'a Store, container: &'a Container) -> Self {
        Self {
            store,
            container,
            ts: unix_now(),
            max_document_bytes: crate::faults::MAX_DOCUMENT_BYTES as usize,
            priority: Priority::High,
        }
    }

    /// Charges the request's operations at `priority` (default high).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Refuses documents larger than `bytes` (413), as the service refuses those over 2 MB.
    pub fn max_document_bytes(mut self, bytes: usize) -> Self {
        self.max_document_bytes = bytes;
        self
    }

    /// Checks a document body (valid JSON): an object with a string `id` whose key is `pk`
    /// (no value at the key path for the undefined key) or, without `pk`, whatever its key is.
    /// With its `fields` (see [`raw::document`]) a document is not parsed; one that carries
    /// system properties, or without fields, is.
    pub fn check_body<'b>(
        &self,
        body: &'b [u8],
        fields: Option<Fields<'b>>,
        pk: Option<PartitionKey>,
    ) -> Result<Checked<'b>, Outcome> {
        if body.len() > self.max_document_bytes {
            return Err(Outcome::error(
                413,
                0,
                0.0,
                format!(
                    "Request size is too large: the document is {} bytes, at most {}.",
                    body.len(),
                    self.max_document_bytes
                ),
            ));
        }
        let path = &self.container.pk_path;
        match fields {
            Some(fields) if !fields.system => {
                let raw_id = fields.id.ok_or_else(missing_id)?;
                let id = match raw::plain_str(raw_id) {
                    Some(id) => id.to_string(),
                    None => serde_json::from_slice::<String>(raw_id).map_err(|_| missing_id())?,
                };
                check_id(&id)?;
                let pk = match pk {
                    Some(pk) if pk.matches_raw(fields.key) => pk,
                    Some(_) => return Err(key_mismatch()),
                    None => PartitionKey::of_raw(fields.key).ok_or_else(key_mismatch)?,
                };
                Ok(Checked {
                    doc: NewDoc::Raw(body),
                    id,
                    pk,
                })
            }
            _ => {
                let value: Value = serde_json::from_slice(body).map_err(|e| {
                    Outcome::error(400, 0, 0.0, format!("The document is not valid JSON: {e}"))
                })?;
                if !value.is_object() {
                    return Err(Outcome::error(
                        400,
                        0,
                        0.0,
                        "The document is not a JSON object.",
                    ));
                }
                let id = value
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or_else(missing_id)?
                    .to_string();
                check_id(&id)?;
                let pk = match pk {
                    Some(pk) if pk.matches_document(&value, path) => pk,
                    Some(_) => return Err(key_mismatch()),
                    None => PartitionKey::of_document(&value, path),
                };
                Ok(Checked {
                    doc: NewDoc::Value(value),
                    id,
                    pk,
                })
            }
        }
    }

    /// Appends the resource id of document number `seq`.
    fn push_rid(&self, out: &mut Vec<u8>, seq: u64) {
        out.extend_from_slice(self.container.rid.as_bytes());
        raw::push_hex(out, seq, 16);
    }

    /// Stores a document with fresh system properties.
    fn build(&self, doc: NewDoc<'_>) -> Arc<Doc> {
        let seq = self.container.next_doc_rid();
        let etag = self.store.next_etag_text();
        match doc {
            NewDoc::Raw(json) => Arc::new(self.splice(json, seq, etag)),
            NewDoc::Value(mut body) => {
                let mut rid = Vec::with_capacity(32);
                self.push_rid(&mut rid, seq);
                let rid = String::from_utf8(rid).expect("ASCII");
                if let Some(obj) = body.as_object_mut() {
                    obj.insert(
                        "_self".into(),
                        Value::String(format!("{}docs/{rid}/", self.container.self_link())),
                    );
                    obj.insert("_rid".into(), Value::String(rid));
                    obj.insert("_etag".into(), Value::String(etag.as_str().to_string()));
                    obj.insert("_attachments".into(), Value::String("attachments/".into()));
                    obj.insert("_ts".into(), json!(self.ts));
                }
                let json = serde_json::to_vec(&body).expect("a JSON value serializes");
                Arc::new(Doc::with_value(body, json, etag, seq))
            }
        }
    }

    /// Appends the system properties to a document's JSON text without parsing it.
    fn splice(&self, json: &[u8], seq: u64, etag: EtagText) -> Doc {
        let open = raw::open_object(json).expect("a checked document is an object");
        let self_link = self.container.self_link().as_bytes();
        let rid_len = self.container.rid.len() + 16;
        let mut out = Vec::with_capacity(open.len() + 2 * rid_len + self_link.len() + 120);
        out.extend_from_slice(open);
        if open.iter().rev().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            out.push(b',');
        }
        out.extend_from_slice(b"\"_rid\":\"");
        self.push_rid(&mut out, seq);
        out.extend_from_slice(b"\",\"_self\":\"");
        out.extend_from_slice(self_link);
        out.extend_from_slice(b"docs/");
        self.push_rid(&mut out, seq);
        out.extend_from_slice(b"/\",\"_etag\":\"\\\"");
        out.extend_from_slice(etag.inner());
        out.extend_from_slice(b"\\\"\",\"_attachments\":\"attachments/\",\"_ts\":");
        raw::push_u64(&mut out, self.ts);
        out.push(b'}');
        Doc::new(out, etag, seq)
    }

    /// Decides an operation against the current document.
    fn decide(
        &self,
        op: DocOp<'_>,
        pre: &Preconditions,
        existing: Option<&Arc<Doc>>,
    ) -> (Outcome, Effect) {
        let mismatch = |d: &Arc<Doc>| matches!(&pre.if_match, Some(e) if e != "*" && e != d.etag());
        let precondition_failed = |charge| (precondition_failed(charge), Effect::None);
        let not_found = || {
            (
                Outcome::error(
                    404,
                    0,
                    ru::read(0),
                    "Entity with the specified id does not exist in the system.",
                ),
                Effect::None,
            )
        };
        let conflict = || {
            (
                Outcome::error(
                    409,
                    0,
                    ru::read(0),
                    "Entity with the specified id already exists in the system.",
                ),
                Effect::None,
            )
        };
        match (op, existing) {
            (DocOp::Read, None) => not_found(),
            (DocOp::Read, Some(d)) => {
                if pre.if_none_match.as_deref() == Some(d.etag()) {
                    return (Outcome::ok(304, ru::read(0), None), Effect::None);
                }
                (
                    Outcome::ok(200, ru::read(d.json().len()), Some(d.clone())),
                    Effect::None,
                )
            }
            (DocOp::Create(_), Some(_)) => conflict(),
            (DocOp::Create(body) | DocOp::Upsert(body), None) => {
                let doc = self.build(body);
                let terms = self.container.indexing.terms(doc.value()).len();
                (
                    Outcome::ok(201, ru::create(doc.json().len(), terms), Some(doc.clone())),
                    Effect::Put(doc),
                )
            }
            (DocOp::Upsert(_) | DocOp::Replace(_), Some(d)) if mismatch(d) => {
                precondition_failed(ru::read(d.json().len()))
            }
            (DocOp::Upsert(_), Some(_)) if pre.if_none_match.as_deref() == Some("*") => conflict(),
            (DocOp::Upsert(body) | DocOp::Replace(body), Some(d)) => {
                let doc = self.build(body);
                let charge =
                    ru::replace(d.json().len(), doc.json().len(), self.term_changes(d, &doc));
                (
                    Outcome::ok(200, charge, Some(doc.clone())),
                    Effect::Put(doc),
                )
            }
            (DocOp::Replace(_) | DocOp::Delete | DocOp::Patch(_), None) => not_found(),
            (DocOp::Delete, Some(d)) if mismatch(d) => {
                precondition_failed(ru::read(d.json().len()))
            }
            (DocOp::Delete, Some(d)) => {
                let terms = self.container.indexing.terms(d.value()).len();
                (
                    Outcome::ok(204, ru::delete(d.json().len(), terms), None),
                    Effect::Remove,
                )
            }
            (DocOp::Patch(_), Some(d)) if mismatch(d) => {
                precondition_failed(ru::read(d.json().len()))
            }
            (DocOp::Patch(patch), Some(d)) => match self.patch(d, patch) {
                Ok(doc) => {
                    let charge =
                        ru::patch(d.json().len(), doc.json().len(), self.term_changes(d, &doc));
                    (
                        Outcome::ok(200, charge, Some(doc.clone())),
                        Effect::Put(doc),
                    )
                }
                Err(outcome) => (outcome, Effect::None),
            },
        }
    }

    /// The indexed terms a write of `new` over `old` removes and adds.
    fn term_changes(&self, old: &Doc, new: &Doc) -> ru::TermChanges {
        let policy = &self.container.indexing;
        let (before, after) = (policy.terms(old.value()), policy.terms(new.value()));
        ru::TermChanges {
            removed: before.difference(&after).count(),
            added: after.difference(&before).count(),
        }
    }

    /// Executes one operation on its partition: decide, charge (or throttle), apply.
    pub fn execute(&self, part: &mut Partition, a: Addressed<'_>) -> Outcome {
        let existing = part.docs.get(&a.pk.canonical).and_then(|l| l.get(&a.id));
        let (outcome, effect) = self.decide(a.op, &a.pre, existing);
        let charged = charged_document(&effect, existing);
        if let Err(wait) = part.bucket.try_take(outcome.charge, self.priority) {
            part.counters.throttle(self.priority);
            return Outcome::throttled(wait);
        }
        part.counters.charge(outcome.charge);
        part.counters
            .charge_kind(charged.as_deref().map_or("", Doc::kind), outcome.charge);
        apply(part, &a.pk, &a.id, effect);
        outcome
    }

    /// Executes a transactional batch on one logical partition: all operations apply or none.
    /// Returns the per-operation outcomes and the HTTP status: 200, the failing operation's
    /// status (the others get 424), or 429 when the whole batch does not fit the budget.
    pub fn execute_atomic(
        &self,
        part: &mut Partition,
        ops: Vec<Addressed<'_>>,
    ) -> (Vec<Outcome>, u16) {
        let count = ops.len();
        let mut overlay: FxHashMap<String, Option<Arc<Doc>>> = FxHashMap::default();
        let mut outcomes = Vec::with_capacity(count);
        let mut effects = Vec::with_capacity(count);
        let mut failed = None;
        let mut charged = Vec::with_capacity(count);
        for (i, a) in ops.into_iter().enumerate() {
            let existing = match overlay.get(a.id.as_str()) {
                Some(staged) => staged.clone(),
                None => part
                    .docs
                    .get(&a.pk.canonical)
                    .and_then(|l| l.get(&a.id))
                    .cloned(),
            };
            let (outcome, effect) = self.decide(a.op, &a.pre, existing.as_ref());
            charged.push((charged_document(&effect, existing.as_ref()), outcome.charge));
            match &effect {
                Effect::Put(d) => {
                    overlay.insert(a.id.clone(), Some(d.clone()));
                }
                Effect::Remove => {
                    overlay.insert(a.id.clone(), None);
                }
                Effect::None => {}
            }
            let ok = outcome.is_success();
            outcomes.push(outcome);
            effects.push((a.pk, a.id, effect));
            if !ok {
                failed = Some(i);
                break;
            }
        }
        let total: f64 = outcomes.iter().map(|o| o.charge).sum();
        if let Err(wait) = part.bucket.try_take(total, self.priority) {
            part.counters.throttle(self.priority);
            return ((0..count).map(|_| Outcome::throttled(wait)).collect(), 429);
        }
        part.counters.charge(total);
        for (doc, charge) in charged {
            part.counters
                .charge_kind(doc.as_deref().map_or("", Doc::kind), charge);
        }
        if let Some(i) = failed {
            let status = outcomes[i].status;
            let results = (0..count)
                .map(|j| {
                    if j == i {
                        outcomes[i].clone()
                    } else {
                        Outcome::error(424, 0, 0.0, "Failed dependency: another operation of the transactional batch failed.")
                    }
                })
                .collect();
            return (results, status);
        }
        for (pk, id, effect) in effects {
            apply(part, &pk, &id, effect);
        }
        (outcomes, 200)
    }
}

fn apply(part: &mut Partition, pk: &PartitionKey, id: &str, effect: Effect) {
    match effect {
        Effect::None => {}
        Effect::Put(doc) => {
            let logical = match part.docs.get_mut(&pk.canonical) {
                Some(l) => l,
                None => part.docs.entry(pk.canonical.clone()).or_default(),
            };
            match logical.get_mut(id) {
                Some(slot) => *slot = doc,
                None => {
                    logical.insert(id.to_string(), doc);
                }
            }
        }
        Effect::Remove => {
            if let Some(l) = part.docs.get_mut(&pk.canonical) {
                l.remove(id);
                if l.is_empty() {
                    part.docs.remove(&pk.canonical);
                }
            }
        }
    }
}

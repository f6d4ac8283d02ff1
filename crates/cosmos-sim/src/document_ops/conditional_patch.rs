//! A patch operation on the current document: its condition checked, then its operations
//! applied to the stored text when they all set top-level members ([`raw::apply_sets`]),
//! otherwise to the parsed document ([`crate::value_patch`]).
//!
//! A condition is parsed once per shape ([`query::shape`]); one that reads a few members
//! of a document not parsed yet is evaluated on those members alone, parsed from the
//! stored text ([`raw::read_members`]).

use super::{Ctx, NewDoc, Outcome, precondition_failed};
use crate::raw;
use crate::ru;
use crate::store::Doc;
use crate::{query, value_patch};
use cosmos_wire::resources::PatchRequest;
use std::sync::Arc;

/// A patch, as read from its body.
#[derive(Debug, Clone)]
pub enum Patch<'a> {
    /// Top-level members set: applied to the stored document's text.
    Sets(raw::SetPatch<'a>),
    /// Any other: applied to the parsed document.
    Parsed(PatchRequest),
}

impl Patch<'_> {
    /// The condition, if any.
    fn condition(&self) -> Option<&str> {
        match self {
            Self::Sets(p) => p.condition,
            Self::Parsed(p) => p.condition.as_deref(),
        }
    }
}

impl Ctx<'_> {
    /// Patches `d`: the new document, or the outcome that refuses the patch (412 when the
    /// condition does not hold, 400 when the condition or an operation is invalid).
    pub(super) fn patch(&self, d: &Doc, patch: Patch<'_>) -> Result<Arc<Doc>, Outcome> {
        if let Some(cond) = patch.condition() {
            let holds = condition_holds(d, cond).map_err(|e| {
                Outcome::error(400, 0, ru::read(0), format!("invalid patch condition: {e}"))
            })?;
            if !holds {
                return Err(precondition_failed(ru::read(d.json().len())));
            }
        }
        let patched = match &patch {
            Patch::Sets(p) => raw::apply_sets(d.json(), &p.sets),
            Patch::Parsed(_) => None,
        };
        match patched {
            Some(text) => Ok(self.build(NewDoc::Raw(&text))),
            None => self
                .patch_value(d, patch)
                .map_err(|e| Outcome::error(400, 0, ru::read(0), e)),
        }
    }

    /// Applies a patch to the parsed document (any patch the text path does not take).
    fn patch_value(&self, d: &Doc, patch: Patch<'_>) -> Result<Arc<Doc>, String> {
        let req = match patch {
            Patch::Parsed(req) => req,
            Patch::Sets(p) => serde_json::from_slice::<PatchRequest>(p.body)
                .map_err(|e| format!("invalid patch body: {e}"))?,
        };
        let mut value = d.value().clone();
        value_patch::apply(&mut value, &req.operations, &self.container.pk_path)
            .map_err(|e| e.to_string())?;
        Ok(self.build(NewDoc::Value(value)))
    }
}

/// Whether the condition `cond` holds for `d`.
fn condition_holds(d: &Doc, cond: &str) -> Result<bool, query::lex::SyntaxError> {
    let c = query::shape::prepare(cond)?;
    let members = match (d.parsed(), &c.condition.reads) {
        (None, Some(names)) => raw::read_members(d.json(), names),
        _ => None,
    };
    let scope = query::eval::Scope {
        alias: &c.condition.alias,
        doc: members.as_ref().unwrap_or_else(|| d.value()),
        params: &c.params,
    };
    Ok(query::eval::holds(&c.condition.filter, &scope))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::eval::{Scope, holds};
    use crate::query::parse::parse_condition;
    use crate::raw::EtagText;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn member() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => (0i64..8).prop_map(Value::from),
            1 => any::<bool>().prop_map(Value::from),
            1 => "[a-z]{0,3}".prop_map(Value::from),
            1 => prop::collection::vec((0i64..3).prop_map(Value::from), 0..3).prop_map(Value::from),
            1 => (0i64..3).prop_map(|n| json!({"b": n})),
        ]
    }

    proptest! {
        /// A condition decides on a stored document, through its shape and the members it
        /// reads, as it does parsed whole on the whole parsed document, and leaves the
        /// document unparsed.
        #[test]
        fn a_condition_decides_on_the_members_it_reads_as_on_the_document(
            members in prop::collection::btree_map("[a-c]|_x", member(), 0..6),
            filter in prop_oneof![
                Just("c.a < 5 OR (c.a = 5 AND c.b < 3)"),
                Just("IS_DEFINED(c.b) AND NOT c.c"),
                Just("c.a.b = 1 OR c.c[0] = 1 OR c._x IN (1, c.b)"),
                Just("c.a = [c.b, {\"k\": c._x}] OR -c.c < 2"),
            ],
        ) {
            let text = serde_json::to_vec(&Value::Object(members.into_iter().collect())).unwrap();
            let value: Value = serde_json::from_slice(&text).unwrap();
            let cond = format!("FROM c WHERE {filter}");
            let whole = parse_condition(&cond).unwrap();
            let scope = Scope { alias: &whole.alias, doc: &value, params: &[] };
            let doc = Doc::new(text, EtagText::new(1), 1);
            prop_assert_eq!(condition_holds(&doc, &cond).unwrap(), holds(&whole.filter, &scope));
            prop_assert!(doc.parsed().is_none());
        }
    }
}

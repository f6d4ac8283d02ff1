//! A patch that only sets top-level members, read and applied on JSON text: the conditional
//! patch the cloud writer sends for each position, done without parsing the stored document
//! into a `serde_json::Value`, changing it and serializing it again.
//!
//! A condition that reads a few members (`c.deviceTimeMs`, `c.seq`) is evaluated on those
//! members alone, parsed from the stored text ([`read_members`]).
//!
//! Anything else (a nested path, `remove`, `incr`, an escaped name, a member set twice, a body
//! of another shape, valid or not) reads as `None`, and the caller takes the parsing path
//! ([`crate::value_patch`]), which also words the errors.

use super::reader::{Invalid, Reader, SYSTEM_PROPERTIES};
use super::write::plain_str;
use serde_json::{Map, Value};

/// One top-level `set`, `add` or `replace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetMember<'a> {
    /// The member's name (no escapes).
    pub name: &'a [u8],
    /// Its new value, JSON text.
    pub value: &'a [u8],
    /// A `replace`: the member must already be there.
    pub must_exist: bool,
}

/// A patch body whose operations all set top-level members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetPatch<'a> {
    /// The whole body, for the parsing path when the stored document is not plain.
    pub body: &'a [u8],
    /// The members set, each once, in order.
    pub sets: Vec<SetMember<'a>>,
    /// The condition, if any (no escapes).
    pub condition: Option<&'a str>,
}

/// Reads a patch body (`{"operations":[...],"condition":"..."}`) whose operations all set
/// top-level members that may be patched: not `id`, not a system property (a name starting with
/// `_`), not the first segment of the partition key path, each at most once. `None` for any
/// other body.
pub fn read_set_patch<'a>(body: &'a [u8], key_path: &[String]) -> Option<SetPatch<'a>> {
    let mut r = Reader::new(std::str::from_utf8(body).ok()?);
    let mut sets: Option<Vec<SetMember<'a>>> = None;
    let mut condition = None;
    let mut seen_condition = false;
    r.ws();
    r.object(0, |r, name, escaped| match name {
        _ if escaped => r.value(1).map(drop),
        b"operations" if sets.is_none() => {
            let mut ops = Vec::new();
            r.array(1, |r| {
                let op = r.set_member()?;
                let allowed = op.name != b"id"
                    && op.name.first() != Some(&b'_')
                    && key_path.first().map(String::as_bytes) != Some(op.name)
                    && !ops.iter().any(|o: &SetMember<'_>| o.name == op.name);
                if !allowed {
                    return Err(Invalid(r.p));
                }
                ops.push(op);
                Ok(())
            })?;
            sets = Some(ops);
            Ok(())
        }
        b"condition" if !seen_condition => {
            seen_condition = true;
            let value = r.value(1)?;
            if value != b"null" {
                condition = Some(plain_str(value).ok_or(Invalid(r.p))?);
            }
            Ok(())
        }
        b"operations" | b"condition" => Err(Invalid(r.p)),
        _ => r.value(1).map(drop),
    })
    .ok()?;
    r.end().ok()?;
    Some(SetPatch {
        body,
        sets: sets?,
        condition,
    })
}

/// Writes `doc` (a stored document, an object) with `sets` applied and without its system
/// properties (`_rid`, `_etag`, ...), the members it keeps in their order and the new ones
/// after them. `None` if a member name has escapes or a
/// `replace` names a member that is not there.
pub fn apply_sets(doc: &[u8], sets: &[SetMember<'_>]) -> Option<Vec<u8>> {
    let added: usize = sets.iter().map(|s| s.name.len() + s.value.len() + 4).sum();
    let mut out = Vec::with_capacity(doc.len() + added);
    let mut found = vec![false; sets.len()];
    let mut r = Reader::new(std::str::from_utf8(doc).ok()?);
    out.push(b'{');
    r.ws();
    r.object(0, |r, name, escaped| {
        let value = r.value(1)?;
        if escaped {
            return Err(Invalid(r.p));
        }
        if name.first() == Some(&b'_') && SYSTEM_PROPERTIES.contains(&name) {
            return Ok(());
        }
        let value = match sets.iter().position(|s| s.name == name) {
            Some(i) => {
                found[i] = true;
                sets[i].value
            }
            None => value,
        };
        push_member(&mut out, name, value);
        Ok(())
    })
    .ok()?;
    r.end().ok()?;
    for (set, found) in sets.iter().zip(found) {
        match (found, set.must_exist) {
            (true, _) => {}
            (false, true) => return None,
            (false, false) => push_member(&mut out, set.name, set.value),
        }
    }
    out.push(b'}');
    Some(out)
}

/// The members of `doc` (a stored document, an object) named in `names`, parsed into an object:
/// all a condition that reads only those members needs of the document. `None` if a member
/// name has escapes.
pub fn read_members(doc: &[u8], names: &[String]) -> Option<Value> {
    let mut found = Map::new();
    let mut r = Reader::new(std::str::from_utf8(doc).ok()?);
    r.ws();
    r.object(0, |r, name, escaped| {
        let value = r.value(1)?;
        if escaped {
            return Err(Invalid(r.p));
        }
        if let Some(n) = names.iter().find(|n| n.as_bytes() == name) {
            let value = serde_json::from_slice(value).map_err(|_| Invalid(r.p))?;
            found.insert(n.clone(), value);
        }
        Ok(())
    })
    .ok()?;
    Some(Value::Object(found))
}

/// Appends `"name":value`, after a comma unless it is the object's first member.
fn push_member(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    if out.len() > 1 {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(name);
    out.extend_from_slice(b"\":");
    out.extend_from_slice(value);
}

impl<'a> Reader<'a> {
    /// One operation object that sets a top-level member; an error for any other.
    fn set_member(&mut self) -> Result<SetMember<'a>, Invalid> {
        let (mut op, mut path, mut value) = (None, None, None);
        self.object(2, |r, name, escaped| {
            let v = r.value(3)?;
            let slot = match name {
                _ if escaped => return Ok(()),
                b"op" => &mut op,
                b"path" => &mut path,
                b"value" => &mut value,
                _ => return Ok(()),
            };
            if slot.replace(v).is_some() {
                return Err(Invalid(r.p));
            }
            Ok(())
        })?;
        let refuse = Invalid(self.p);
        let op = op.and_then(plain_str).ok_or(refuse)?;
        let must_exist = if op.eq_ignore_ascii_case("replace") {
            true
        } else if op.eq_ignore_ascii_case("set") || op.eq_ignore_ascii_case("add") {
            false
        } else {
            return Err(refuse);
        };
        let name = path
            .and_then(plain_str)
            .and_then(|p| p.strip_prefix('/'))
            .filter(|n| !n.is_empty() && !n.contains(['/', '~']))
            .ok_or(refuse)?;
        Ok(SetMember {
            name: name.as_bytes(),
            value: value.ok_or(refuse)?,
            must_exist,
        })
    }
}

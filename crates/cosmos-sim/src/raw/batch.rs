//! A batch request body read in one validating pass: each operation's kind, id, preconditions
//! and partition key, its document kept as JSON text with the fields [`super::document`] finds.

use super::reader::{Fields, Invalid, Reader};
use cosmos_wire::batch::OperationType;
use std::borrow::Cow;

/// One operation of a batch request body, read in the same pass that validates its document:
/// the document and the partition key stay JSON text borrowed from the body.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchOp<'a> {
    /// What to do.
    pub operation_type: OperationType,
    /// The `partitionKey` value as JSON text (a string holding the key's JSON array).
    pub partition_key: Option<&'a [u8]>,
    /// The `id`.
    pub id: Option<Cow<'a, str>>,
    /// The `resourceBody` as JSON text, with its fields when it is a plain object.
    pub resource_body: Option<(&'a [u8], Option<Fields<'a>>)>,
    /// `ifMatch`.
    pub if_match: Option<String>,
    /// `ifNoneMatch`.
    pub if_none_match: Option<String>,
}

/// Why a batch body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Not valid JSON.
    #[error(transparent)]
    Json(#[from] Invalid),
    /// Valid JSON, but not an array of operations.
    #[error("{0}")]
    Shape(String),
}

/// Reads a batch request body (a JSON array of operations), validating all of it, scanning
/// each document for its `id` and the value at `key_path`.
pub fn read_batch<'a>(text: &'a str, key_path: &[String]) -> Result<Vec<BatchOp<'a>>, BatchError> {
    let mut r = Reader::new(text);
    let mut ops = Vec::new();
    r.ws();
    r.array(0, |r| {
        ops.push(r.batch_op(key_path)?);
        Ok::<_, BatchError>(())
    })?;
    r.end()?;
    Ok(ops)
}

impl<'a> Reader<'a> {
    /// A string value or `null`: its text with the quotes and whether it has escapes.
    fn opt_string(&mut self) -> Result<Option<(&'a [u8], bool)>, BatchError> {
        self.ws();
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Ok(None);
        }
        if self.peek() != Some(b'"') {
            return Err(BatchError::Shape(format!(
                "expected a string at byte {}",
                self.p
            )));
        }
        Ok(Some(self.string()?))
    }

    fn batch_op(&mut self, key_path: &[String]) -> Result<BatchOp<'a>, BatchError> {
        let mut op = BatchOp {
            operation_type: OperationType::Read,
            partition_key: None,
            id: None,
            resource_body: None,
            if_match: None,
            if_none_match: None,
        };
        let mut kind = None;
        let mut shape = None;
        if self.peek() != Some(b'{') {
            return Err(BatchError::Shape(format!(
                "an operation is not an object (byte {})",
                self.p
            )));
        }
        self.object(1, |r, name, escaped| {
            let name: Cow<'_, [u8]> = if escaped {
                let quoted = [b"\"", name, b"\""].concat();
                serde_json::from_slice::<String>(&quoted)
                    .map_or(Cow::Borrowed(&b""[..]), |n| Cow::Owned(n.into_bytes()))
            } else {
                Cow::Borrowed(name)
            };
            let unescape = |(raw, escaped): (&'a [u8], bool)| -> Cow<'a, str> {
                if escaped {
                    Cow::Owned(serde_json::from_slice(raw).unwrap_or_default())
                } else {
                    Cow::Borrowed(std::str::from_utf8(&raw[1..raw.len() - 1]).unwrap_or_default())
                }
            };
            let mut string = |r: &mut Self| match r.opt_string() {
                Ok(s) => Ok(s.map(unescape)),
                Err(BatchError::Json(e)) => Err(e),
                Err(BatchError::Shape(m)) => {
                    shape.get_or_insert(m);
                    r.value(2).map(|_| None)
                }
            };
            match &*name {
                b"operationType" => kind = string(r)?,
                b"id" => op.id = string(r)?,
                b"ifMatch" => op.if_match = string(r)?.map(Cow::into_owned),
                b"ifNoneMatch" => op.if_none_match = string(r)?.map(Cow::into_owned),
                b"partitionKey" => {
                    let v = r.value(2)?;
                    op.partition_key = (v != b"null").then_some(v);
                }
                b"resourceBody" => {
                    r.ws();
                    let start = r.p;
                    let fields = r.fields(key_path)?;
                    let v = &r.b[start..r.p];
                    op.resource_body = (v != b"null").then_some((v, fields));
                }
                _ => {
                    r.value(2)?;
                }
            }
            Ok(())
        })?;
        if let Some(m) = shape {
            return Err(BatchError::Shape(m));
        }
        op.operation_type = match kind.as_deref() {
            Some("Create") => OperationType::Create,
            Some("Upsert") => OperationType::Upsert,
            Some("Read") => OperationType::Read,
            Some("Delete") => OperationType::Delete,
            Some("Replace") => OperationType::Replace,
            Some("Patch") => OperationType::Patch,
            Some(other) => {
                return Err(BatchError::Shape(format!(
                    "unknown operationType {other:?}"
                )));
            }
            None => return Err(BatchError::Shape("missing field `operationType`".into())),
        };
        Ok(op)
    }
}

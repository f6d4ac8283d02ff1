//! The write path over raw JSON bytes: finding a document's `id`, partition key value and
//! system properties by scanning its top level instead of building a `serde_json::Value`, and
//! writing numbers, hex and ETags straight into response and document buffers.
//!
//! The scanner expects JSON that was already validated (request bodies go through
//! `serde_json::value::RawValue` first); on anything it does not expect it answers `None`, and
//! the caller takes the parsing path instead.

use cosmos_wire::batch::OperationType;
use std::borrow::Cow;

/// The system properties the endpoint adds to every stored document.
const SYSTEM_PROPERTIES: [&[u8]; 5] = [b"_rid", b"_self", b"_etag", b"_ts", b"_attachments"];

/// What one scan of a document's top level found (raw JSON text of each value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields<'a> {
    /// The value of `id`, as JSON text.
    pub id: Option<&'a [u8]>,
    /// The value at the partition key path, as JSON text.
    pub key: Option<&'a [u8]>,
    /// Whether the document already carries a system property (`_rid`, `_etag`, ...).
    pub system: bool,
}

/// Where a body stopped being the JSON expected: the byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON at byte {0}")]
pub struct Invalid(pub usize);

/// Arrays and objects may nest this deep at the most (as in `serde_json`, which refuses the
/// 128th level).
const MAX_DEPTH: usize = 127;

/// Reads a whole document (validating it): its fields if it is an object whose member names
/// have no escapes, `None` for any other valid JSON.
pub fn document<'a>(text: &'a str, key_path: &[String]) -> Result<Option<Fields<'a>>, Invalid> {
    let mut r = Reader::new(text);
    r.ws();
    let fields = r.fields(key_path)?;
    r.end()?;
    Ok(fields)
}

/// The raw value of member `name` of an object (valid JSON): `Some(None)` if it is absent or
/// `obj` is not an object, `None` if a member name has escapes.
fn member<'a>(obj: &'a [u8], name: &str) -> Option<Option<&'a [u8]>> {
    if obj.first() != Some(&b'{') {
        return Some(None);
    }
    let mut r = Reader::new(std::str::from_utf8(obj).ok()?);
    let mut found = None;
    let mut plain = true;
    r.object(0, |r, n, escaped| {
        let v = r.value(1)?;
        plain &= !escaped;
        if n == name.as_bytes() {
            found = Some(v);
        }
        Ok(())
    })
    .ok()?;
    plain.then_some(found)
}

/// A validating, non-allocating JSON reader over text (so UTF-8 is already checked).
pub struct Reader<'a> {
    b: &'a [u8],
    p: usize,
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

impl<'a> Reader<'a> {
    /// A reader at the start of `text`.
    pub fn new(text: &'a str) -> Self {
        Self {
            b: text.as_bytes(),
            p: 0,
        }
    }

    fn fail<T>(&self) -> Result<T, Invalid> {
        Err(Invalid(self.p))
    }

    fn ws(&mut self) {
        while matches!(self.b.get(self.p), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.p += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.p).copied()
    }

    fn eat(&mut self, c: u8) -> Result<(), Invalid> {
        self.ws();
        if self.peek() != Some(c) {
            return self.fail();
        }
        self.p += 1;
        Ok(())
    }

    /// Only whitespace remains.
    fn end(&mut self) -> Result<(), Invalid> {
        self.ws();
        if self.p != self.b.len() {
            return self.fail();
        }
        Ok(())
    }

    /// A string at the cursor: its text with the quotes, and whether it has escapes.
    fn string(&mut self) -> Result<(&'a [u8], bool), Invalid> {
        let start = self.p;
        if self.peek() != Some(b'"') {
            return self.fail();
        }
        self.p += 1;
        let mut escaped = false;
        loop {
            // Eight bytes at a time while none is a quote, a backslash or a control character.
            while let Some(chunk) = self.b.get(self.p..self.p + 8) {
                let x = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                let quote = x ^ (LO * u64::from(b'"'));
                let slash = x ^ (LO * u64::from(b'\\'));
                let special = (quote.wrapping_sub(LO) & !quote)
                    | (slash.wrapping_sub(LO) & !slash)
                    | (x.wrapping_sub(LO * 0x20) & !x);
                if special & HI != 0 {
                    // The lowest flagged byte is exact (borrows only carry upwards).
                    self.p += ((special & HI).trailing_zeros() / 8) as usize;
                    break;
                }
                self.p += 8;
            }
            match self.peek() {
                None => return self.fail(),
                Some(b'"') => {
                    self.p += 1;
                    return Ok((&self.b[start..self.p], escaped));
                }
                Some(b'\\') => {
                    escaped = true;
                    match self.b.get(self.p + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.p += 2,
                        Some(b'u') => match self.hex_escape(self.p) {
                            // A leading surrogate must be followed by a trailing one, as
                            // `serde_json` requires when it parses the string.
                            Some(0xD800..=0xDBFF)
                                if self.b.get(self.p + 6) == Some(&b'\\')
                                    && self.b.get(self.p + 7) == Some(&b'u')
                                    && matches!(
                                        self.hex_escape(self.p + 6),
                                        Some(0xDC00..=0xDFFF)
                                    ) =>
                            {
                                self.p += 12
                            }
                            Some(0xD800..=0xDFFF) | None => return self.fail(),
                            Some(_) => self.p += 6,
                        },
                        _ => return self.fail(),
                    }
                }
                Some(c) if c < 0x20 => return self.fail(),
                Some(_) => self.p += 1,
            }
        }
    }

    /// The code unit of the `\uXXXX` escape at `at`.
    fn hex_escape(&self, at: usize) -> Option<u16> {
        let hex = self.b.get(at + 2..at + 6)?;
        if !hex.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    }

    fn digits(&mut self) -> Result<(), Invalid> {
        let start = self.p;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.p += 1;
        }
        if self.p == start {
            return self.fail();
        }
        Ok(())
    }

    fn number(&mut self) -> Result<(), Invalid> {
        let start = self.p;
        if self.peek() == Some(b'-') {
            self.p += 1;
        }
        match self.peek() {
            Some(b'0') => self.p += 1,
            Some(b'1'..=b'9') => self.digits()?,
            _ => return self.fail(),
        }
        let integer_digits = self.p - start;
        if self.peek() == Some(b'.') {
            self.p += 1;
            self.digits()?;
        }
        let mut exponent = false;
        if matches!(self.peek(), Some(b'e' | b'E')) {
            exponent = true;
            self.p += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.p += 1;
            }
            self.digits()?;
        }
        // `serde_json` refuses numbers beyond f64's range; only an exponent or more than 308
        // integer digits can get there.
        if exponent || integer_digits > 308 {
            let text = std::str::from_utf8(&self.b[start..self.p]).map_err(|_| Invalid(start))?;
            if !text.parse::<f64>().is_ok_and(f64::is_finite) {
                return Err(Invalid(start));
            }
        }
        Ok(())
    }

    /// One value at the cursor (after whitespace), validated; returns its text.
    pub fn value(&mut self, depth: usize) -> Result<&'a [u8], Invalid> {
        self.ws();
        let start = self.p;
        match self.peek() {
            Some(b'"') => {
                self.string()?;
            }
            Some(b'{') => self.object(depth, |r, _, _| r.value(depth + 1).map(drop))?,
            Some(b'[') => {
                if depth >= MAX_DEPTH {
                    return self.fail();
                }
                self.p += 1;
                self.ws();
                if self.peek() == Some(b']') {
                    self.p += 1;
                } else {
                    loop {
                        self.value(depth + 1)?;
                        self.ws();
                        match self.peek() {
                            Some(b',') => self.p += 1,
                            Some(b']') => {
                                self.p += 1;
                                break;
                            }
                            _ => return self.fail(),
                        }
                    }
                }
            }
            Some(b't') => self.literal(b"true")?,
            Some(b'f') => self.literal(b"false")?,
            Some(b'n') => self.literal(b"null")?,
            _ => self.number()?,
        }
        Ok(&self.b[start..self.p])
    }

    fn literal(&mut self, lit: &[u8]) -> Result<(), Invalid> {
        if !self.b[self.p..].starts_with(lit) {
            return self.fail();
        }
        self.p += lit.len();
        Ok(())
    }

    /// An object at the cursor: `f(reader, name, escaped)` is called with the cursor before
    /// each member's value and must read it. `name` is the name's text without the quotes.
    pub fn object(
        &mut self,
        depth: usize,
        mut f: impl FnMut(&mut Self, &'a [u8], bool) -> Result<(), Invalid>,
    ) -> Result<(), Invalid> {
        if depth >= MAX_DEPTH {
            return self.fail();
        }
        self.eat(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.p += 1;
            return Ok(());
        }
        loop {
            self.ws();
            let (name, escaped) = self.string()?;
            self.eat(b':')?;
            f(self, &name[1..name.len() - 1], escaped)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.p += 1,
                Some(b'}') => {
                    self.p += 1;
                    return Ok(());
                }
                _ => return self.fail(),
            }
        }
    }

    /// A document at the cursor: see [`document`].
    fn fields(&mut self, key_path: &[String]) -> Result<Option<Fields<'a>>, Invalid> {
        let Some((first, rest)) = key_path.split_first() else {
            self.value(0)?;
            return Ok(None);
        };
        if self.peek() != Some(b'{') {
            self.value(0)?;
            return Ok(None);
        }
        let mut fields = Fields {
            id: None,
            key: None,
            system: false,
        };
        let mut plain = true;
        self.object(0, |r, name, escaped| {
            let value = r.value(1)?;
            if escaped {
                plain = false;
                return Ok(());
            }
            if name == b"id" {
                fields.id = Some(value);
            }
            if name == first.as_bytes() {
                fields.key = Some(value);
            }
            if name.first() == Some(&b'_') && SYSTEM_PROPERTIES.contains(&name) {
                fields.system = true;
            }
            Ok(())
        })?;
        for seg in rest {
            let Some(v) = fields.key else { break };
            match member(v, seg) {
                Some(found) => fields.key = found,
                None => {
                    plain = false;
                    break;
                }
            }
        }
        Ok(plain.then_some(fields))
    }
}

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
    r.eat(b'[')?;
    r.ws();
    if r.peek() == Some(b']') {
        r.p += 1;
        r.end()?;
        return Ok(ops);
    }
    loop {
        r.ws();
        ops.push(r.batch_op(key_path)?);
        r.ws();
        match r.peek() {
            Some(b',') => r.p += 1,
            Some(b']') => {
                r.p += 1;
                break;
            }
            _ => return Err(Invalid(r.p).into()),
        }
    }
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

/// The contents of a JSON string literal that has no escapes (`"abc"` gives `abc`).
pub fn plain_str(raw: &[u8]) -> Option<&str> {
    let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if !is_plain(inner) {
        return None;
    }
    std::str::from_utf8(inner).ok()
}

/// Whether text can stand between JSON quotes as is: no quote, backslash or control character.
pub fn is_plain(text: &[u8]) -> bool {
    !text.iter().any(|&b| b == b'\\' || b == b'"' || b < 0x20)
}

/// A JSON object without its closing brace and trailing whitespace, so that members can be
/// appended; `None` if `doc` does not end in `}`.
pub fn open_object(doc: &[u8]) -> Option<&[u8]> {
    let end = doc.iter().rposition(|b| !b.is_ascii_whitespace())?;
    (doc[end] == b'}').then(|| &doc[..end])
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `n` as `digits` lowercase hex digits (the low ones).
pub fn push_hex(out: &mut Vec<u8>, n: u64, digits: u32) {
    for i in (0..digits).rev() {
        out.push(HEX[((n >> (4 * i)) & 0xF) as usize]);
    }
}

/// Appends a number in decimal.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends a request charge as `f64`'s `Display` writes it; charges are whole hundredths, which
/// are written without going through float formatting.
pub fn push_charge(out: &mut Vec<u8>, charge: f64) {
    let hundredths = (charge * 100.0).round();
    if !(0.0..1e15).contains(&hundredths) || hundredths / 100.0 != charge {
        out.extend_from_slice(charge.to_string().as_bytes());
        return;
    }
    let h = hundredths as u64;
    push_u64(out, h / 100);
    match h % 100 {
        0 => {}
        f if f % 10 == 0 => {
            out.push(b'.');
            out.push(b'0' + (f / 10) as u8);
        }
        f => {
            out.push(b'.');
            out.push(b'0' + (f / 10) as u8);
            out.push(b'0' + (f % 10) as u8);
        }
    }
}

/// Length of an ETag's text, quotes included.
pub const ETAG_LEN: usize = 38;

/// The text of ETag number `n` (quoted, as in `_etag` and the `etag` header), e.g.
/// `"0000002a-0000-0000-0000-000000000000"`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EtagText([u8; ETAG_LEN]);

impl EtagText {
    /// The text of ETag number `n`: its low 32 bits, then the next 16, in hex.
    pub fn new(n: u64) -> Self {
        let mut buf = Vec::with_capacity(ETAG_LEN);
        buf.push(b'"');
        push_hex(&mut buf, n, 8);
        buf.push(b'-');
        push_hex(&mut buf, n >> 32, 4);
        buf.extend_from_slice(b"-0000-0000-000000000000\"");
        let mut out = [0u8; ETAG_LEN];
        out.copy_from_slice(&buf);
        Self(out)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("ASCII")
    }

    /// The text between the quotes.
    pub fn inner(&self) -> &[u8] {
        &self.0[1..ETAG_LEN - 1]
    }
}

impl std::fmt::Debug for EtagText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn path(p: &str) -> Vec<String> {
        p.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    fn scan<'a>(doc: &'a [u8], key_path: &[String]) -> Option<Fields<'a>> {
        document(std::str::from_utf8(doc).unwrap(), key_path).unwrap()
    }

    #[test]
    fn finds_id_key_and_system_properties() {
        let doc = br#" { "id" : "a", "n": [1, {"id": "inner"}], "deviceId":"d-1","s":"x\"}" } "#;
        let f = scan(doc, &path("/deviceId")).unwrap();
        assert_eq!(f.id, Some(&br#""a""#[..]));
        assert_eq!(f.key, Some(&br#""d-1""#[..]));
        assert!(!f.system);
        let f = scan(br#"{"id":"a","_etag":"x"}"#, &path("/deviceId")).unwrap();
        assert_eq!((f.key, f.system), (None, true));
        let f = scan(br#"{"a":{"b":7},"id":1}"#, &path("/a/b")).unwrap();
        assert_eq!((f.id, f.key), (Some(&b"1"[..]), Some(&b"7"[..])));
        assert_eq!(scan(br#"{"a":3}"#, &path("/a/b")).unwrap().key, None);
        let f = scan(br#"{"id":"x"}"#, &path("/id")).unwrap();
        assert_eq!((f.id, f.key), (Some(&br#""x""#[..]), Some(&br#""x""#[..])));
        assert_eq!(
            scan(b"{}", &path("/a")).unwrap(),
            Fields {
                id: None,
                key: None,
                system: false
            }
        );
        assert!(scan(b"[1]", &path("/a")).is_none());
        assert!(scan(br#"{"\u0069d":"a"}"#, &path("/a")).is_none());
        for bad in [
            &br#"{"id":"a"} x"#[..],
            br#"{"id":"a",}"#,
            br#"{"id":01}"#,
            br#"{"id":"a\q"}"#,
            b"{\"id\":\"a\x01\"}",
            br#"{"id":tru}"#,
            br#"{"id" "a"}"#,
            br#"[1,]"#,
            br#"{"id":1e400}"#,
            br#"[-1E+309]"#,
            b"",
        ] {
            let text = std::str::from_utf8(bad).unwrap();
            assert!(document(text, &path("/a")).is_err(), "{text:?}");
            assert!(serde_json::from_slice::<Value>(bad).is_err(), "{text:?}");
        }
    }

    #[test]
    fn nesting_and_number_limits_match_serde_json() {
        for depth in [126, 127, 128, 129] {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            assert_eq!(
                document(&text, &path("/a")).is_ok(),
                serde_json::from_str::<Value>(&text).is_ok(),
                "{depth}"
            );
        }
        let big = "9".repeat(400);
        assert!(document(&big, &path("/a")).is_err());
        assert!(serde_json::from_str::<Value>(&big).is_err());
        assert!(document("1e-400", &path("/a")).is_ok());
    }

    #[test]
    fn reads_batch_operations_with_their_documents() {
        let body = r#"[{"operationType":"Upsert","partitionKey":"[\"d\"]","resourceBody":{"id":"a","deviceId":"d"}},
            {"operationType":"Read","id":"a\"b","ifMatch":"\"e\"","extra":[1,{"x":null}],"partitionKey":null}]"#;
        let ops = read_batch(body, &path("/deviceId")).unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].operation_type, OperationType::Upsert);
        assert_eq!(ops[0].partition_key, Some(&br#""[\"d\"]""#[..]));
        let (doc, fields) = ops[0].resource_body.unwrap();
        assert_eq!(doc, br#"{"id":"a","deviceId":"d"}"#);
        assert_eq!(fields.unwrap().key, Some(&br#""d""#[..]));
        assert_eq!(ops[1].id.as_deref(), Some("a\"b"));
        assert_eq!(ops[1].if_match.as_deref(), Some("\"e\""));
        assert_eq!((ops[1].partition_key, ops[1].resource_body), (None, None));
        assert_eq!(read_batch("[]", &path("/a")).unwrap(), vec![]);
        assert!(matches!(
            read_batch(r#"[{"id":"a"}]"#, &path("/a")),
            Err(BatchError::Shape(_))
        ));
        assert!(matches!(
            read_batch(r#"[{"operationType":"Nope"}]"#, &path("/a")),
            Err(BatchError::Shape(_))
        ));
        assert!(matches!(
            read_batch(r#"[{"operationType":"Read","id":3}]"#, &path("/a")),
            Err(BatchError::Shape(_))
        ));
        assert!(matches!(
            read_batch(r#"[{"operationType":"Read"}"#, &path("/a")),
            Err(BatchError::Json(_))
        ));
        assert!(matches!(
            read_batch(r#"{"operationType":"Read"}"#, &path("/a")),
            Err(BatchError::Json(_))
        ));
    }

    #[test]
    fn charges_and_etags_are_written_as_before() {
        for c in [0.0, 1.0, 5.7, 7.98, 5.05, 12.3, 1234.56, 0.01, 1e20, 0.125] {
            let mut out = Vec::new();
            push_charge(&mut out, c);
            assert_eq!(String::from_utf8(out).unwrap(), c.to_string());
        }
        assert_eq!(
            EtagText::new(42).as_str(),
            format!("\"{:08x}-0000-0000-0000-000000000000\"", 42)
        );
        assert_eq!(
            EtagText::new(42).inner(),
            &EtagText::new(42).as_str().as_bytes()[1..37]
        );
        assert_ne!(EtagText::new(1 << 32), EtagText::new(0));
        assert_eq!(plain_str(br#""ab""#), Some("ab"));
        assert_eq!(plain_str(br#""a\nb""#), None);
        assert_eq!(open_object(b"{\"a\":1} \n"), Some(&b"{\"a\":1"[..]));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e9f64..1e9).prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z_]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn reader_agrees_with_the_parser(
            members in prop::collection::btree_map("[a-z_]{1,4}|id|pk|_etag", arb_json(), 0..6),
            pretty in any::<bool>(),
        ) {
            let built = Value::Object(members.into_iter().collect());
            let text = if pretty { serde_json::to_vec_pretty(&built) } else { serde_json::to_vec(&built) }.unwrap();
            // Compared with the text parsed back (floats need not round-trip exactly).
            let doc: Value = serde_json::from_slice(&text).unwrap();
            let f = scan(&text, &path("/pk")).unwrap();
            let op = format!(r#"[{{"operationType":"Create","resourceBody":{}}}]"#, String::from_utf8(text.clone()).unwrap());
            let ops = read_batch(&op, &path("/pk")).unwrap();
            prop_assert_eq!(ops[0].resource_body, Some((&text[..], Some(f))));
            let raw = |v: Option<&[u8]>| v.map(|r| serde_json::from_slice::<Value>(r).unwrap());
            prop_assert_eq!(raw(f.id), doc.get("id").cloned());
            prop_assert_eq!(raw(f.key), doc.get("pk").cloned());
            prop_assert_eq!(f.system, doc.get("_etag").is_some());
            let open = open_object(&text).unwrap();
            let mut spliced = open.to_vec();
            spliced.extend_from_slice(if doc.as_object().unwrap().is_empty() { b"\"z\":1}" } else { b",\"z\":1}" });
            let mut expected = doc.clone();
            expected["z"] = json!(1);
            prop_assert_eq!(serde_json::from_slice::<Value>(&spliced).unwrap(), expected);
        }
    }

    proptest! {
        #[test]
        fn reader_accepts_exactly_what_serde_json_accepts(text in r#"[\[\]{}",:0-9a-z\\ .eE+\-\x01\té]{0,40}"#) {
            let ours = document(&text, &["a".to_string()]).is_ok();
            let theirs = serde_json::from_str::<Value>(&text).is_ok();
            prop_assert_eq!(ours, theirs, "{:?}", text);
        }

        #[test]
        fn strings_are_read_as_serde_json_reads_them(body in r#"([a-z0-9 é]|\\[nu"\\q]|\\u[dD][89aAcC]00|\x01|")?{0,40}"#) {
            let text = format!("[\"{body}\",1]");
            let ours = document(&text, &["a".to_string()]).is_ok();
            let theirs = serde_json::from_str::<Value>(&text).is_ok();
            prop_assert_eq!(ours, theirs, "{:?}", text);
        }
    }
}

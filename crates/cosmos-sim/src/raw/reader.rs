//! The validating, non-allocating JSON reader, and what one pass of it finds in a document: its
//! `id`, the value at the partition key path, and whether it carries system properties.

/// The system properties the endpoint adds to every stored document.
pub(super) const SYSTEM_PROPERTIES: [&[u8]; 5] =
    [b"_rid", b"_self", b"_etag", b"_ts", b"_attachments"];

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
    pub(super) b: &'a [u8],
    pub(super) p: usize,
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

    pub(super) fn ws(&mut self) {
        while matches!(self.b.get(self.p), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.p += 1;
        }
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.b.get(self.p).copied()
    }

    pub(super) fn eat(&mut self, c: u8) -> Result<(), Invalid> {
        self.ws();
        if self.peek() != Some(c) {
            return self.fail();
        }
        self.p += 1;
        Ok(())
    }

    /// Only whitespace remains.
    pub(super) fn end(&mut self) -> Result<(), Invalid> {
        self.ws();
        if self.p != self.b.len() {
            return self.fail();
        }
        Ok(())
    }

    /// A string at the cursor: its text with the quotes, and whether it has escapes.
    pub(super) fn string(&mut self) -> Result<(&'a [u8], bool), Invalid> {
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
            Some(b'[') => self.array(depth, |r| r.value(depth + 1).map(drop))?,
            Some(b't') => self.literal(b"true")?,
            Some(b'f') => self.literal(b"false")?,
            Some(b'n') => self.literal(b"null")?,
            _ => self.number()?,
        }
        Ok(&self.b[start..self.p])
    }

    pub(super) fn literal(&mut self, lit: &[u8]) -> Result<(), Invalid> {
        if !self.b[self.p..].starts_with(lit) {
            return self.fail();
        }
        self.p += lit.len();
        Ok(())
    }

    /// An array at the cursor (after whitespace): `f(reader)` is called with the cursor before
    /// each item and must read it.
    pub fn array<E: From<Invalid>>(
        &mut self,
        depth: usize,
        mut f: impl FnMut(&mut Self) -> Result<(), E>,
    ) -> Result<(), E> {
        if depth >= MAX_DEPTH {
            return Ok(self.fail()?);
        }
        self.eat(b'[')?;
        self.ws();
        if self.peek() == Some(b']') {
            self.p += 1;
            return Ok(());
        }
        loop {
            self.ws();
            f(self)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.p += 1,
                Some(b']') => {
                    self.p += 1;
                    return Ok(());
                }
                _ => return Ok(self.fail()?),
            }
        }
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
    pub(super) fn fields(&mut self, key_path: &[String]) -> Result<Option<Fields<'a>>, Invalid> {
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

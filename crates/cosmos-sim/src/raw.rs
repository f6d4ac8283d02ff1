//! The write path over raw JSON bytes: finding a document's `id`, partition key value and
//! system properties by scanning its top level instead of building a `serde_json::Value`, and
//! writing numbers, hex and ETags straight into response and document buffers.
//!
//! The scanner expects JSON that was already validated (request bodies go through
//! `serde_json::value::RawValue` first); on anything it does not expect it answers `None`, and
//! the caller takes the parsing path instead.

use std::ops::Range;

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

/// Scans a JSON object for its `id`, the value at `key_path` and any system property.
/// `None` if `doc` is not a JSON object the scanner handles (escaped member names included).
pub fn scan<'a>(doc: &'a [u8], key_path: &[String]) -> Option<Fields<'a>> {
    let (first, rest) = key_path.split_first()?;
    let mut fields = Fields {
        id: None,
        key: None,
        system: false,
    };
    let mut first_value = None;
    for_each_member(doc, |name, value| {
        if name == b"id" {
            fields.id = Some(value);
        }
        if name == first.as_bytes() {
            first_value = Some(value);
        }
        if name.first() == Some(&b'_') && SYSTEM_PROPERTIES.contains(&name) {
            fields.system = true;
        }
    })?;
    let mut key = first_value;
    for seg in rest {
        key = match key {
            Some(v) => member(v, seg)?,
            None => None,
        };
    }
    fields.key = key;
    Some(fields)
}

/// The raw value of member `name` of an object: `Some(None)` if it is absent or `obj` is not
/// an object, `None` if the scanner cannot read it.
fn member<'a>(obj: &'a [u8], name: &str) -> Option<Option<&'a [u8]>> {
    if obj.first() != Some(&b'{') {
        return Some(None);
    }
    let mut found = None;
    for_each_member(obj, |n, v| {
        if n == name.as_bytes() {
            found = Some(v);
        }
    })?;
    Some(found)
}

/// Calls `f(name, value)` for each member of a JSON object (names without their quotes,
/// values as JSON text). `None` if it is not an object or a name has escapes.
fn for_each_member<'a>(doc: &'a [u8], mut f: impl FnMut(&'a [u8], &'a [u8])) -> Option<()> {
    let mut p = skip_ws(doc, 0);
    if doc.get(p) != Some(&b'{') {
        return None;
    }
    p = skip_ws(doc, p + 1);
    if doc.get(p) == Some(&b'}') {
        return (skip_ws(doc, p + 1) == doc.len()).then_some(());
    }
    loop {
        if doc.get(p) != Some(&b'"') {
            return None;
        }
        let end = skip_string(doc, p)?;
        let name = &doc[p + 1..end - 1];
        if name.contains(&b'\\') {
            return None;
        }
        p = skip_ws(doc, end);
        if doc.get(p) != Some(&b':') {
            return None;
        }
        let start = skip_ws(doc, p + 1);
        let stop = skip_value(doc, start)?;
        f(name, &doc[start..stop]);
        p = skip_ws(doc, stop);
        match doc.get(p)? {
            b',' => p = skip_ws(doc, p + 1),
            b'}' => return (skip_ws(doc, p + 1) == doc.len()).then_some(()),
            _ => return None,
        }
    }
}

fn skip_ws(b: &[u8], mut p: usize) -> usize {
    while matches!(b.get(p), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        p += 1;
    }
    p
}

/// From the opening quote of a string to just past its closing quote.
fn skip_string(b: &[u8], p: usize) -> Option<usize> {
    let mut i = p + 1;
    loop {
        match b.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// From the first byte of a value to just past it.
fn skip_value(b: &[u8], p: usize) -> Option<usize> {
    match b.get(p)? {
        b'"' => skip_string(b, p),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = p;
            loop {
                match b.get(i)? {
                    b'"' => {
                        i = skip_string(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let mut i = p;
            while !matches!(
                b.get(i),
                None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            ) {
                i += 1;
            }
            (i > p).then_some(i)
        }
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

/// The byte range of `part` inside `whole` (both from the same buffer).
pub fn range_in(whole: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
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
        assert!(scan(br#"{"id":"a"} x"#, &path("/a")).is_none());
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
        fn scan_agrees_with_the_parser(
            members in prop::collection::btree_map("[a-z_]{1,4}|id|pk|_etag", arb_json(), 0..6),
            pretty in any::<bool>(),
        ) {
            let built = Value::Object(members.into_iter().collect());
            let text = if pretty { serde_json::to_vec_pretty(&built) } else { serde_json::to_vec(&built) }.unwrap();
            // Compared with the text parsed back (floats need not round-trip exactly).
            let doc: Value = serde_json::from_slice(&text).unwrap();
            let f = scan(&text, &path("/pk")).unwrap();
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
}

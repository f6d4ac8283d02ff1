//! JSON text written or spliced as is: plain strings, an object opened to append members,
//! numbers, hex, request charges and ETags.

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
const ETAG_LEN: usize = 38;

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

    /// The number this text was made from (its low 48 bits): the write's place in the
    /// account's order, which the change feed pages by.
    pub fn number(&self) -> u64 {
        let hex = |from: usize, len: usize| {
            self.0[from..from + len].iter().fold(0u64, |n, &b| {
                (n << 4) | u64::from((b as char).to_digit(16).unwrap_or(0))
            })
        };
        hex(1, 8) | (hex(10, 4) << 32)
    }
}

impl std::fmt::Debug for EtagText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

//! The fast path of [`super::decode`]: one pass over the bytes of a flat version 1 message.
//!
//! Owns the reading of the common shape of a message: one UTF-8 JSON object whose values
//! are `null`, numbers, booleans or strings without escapes, each known field once.
//! Keys are matched as bytes, strings borrow from the input, integers are read digit by
//! digit and floats are computed exactly (the exact fast path of Clinger's algorithm when
//! it applies, the standard library's correctly rounded parser otherwise).
//!
//! [`scan`] gives up (`None`) on anything else: escapes, invalid UTF-8, nested values,
//! a known field given twice, integers that do not fit, out-of-range floats, any syntax
//! error. The caller then runs the reference decoder on the same bytes, so the result of
//! `decode` never depends on which path read a message: whenever `scan` returns fields,
//! they are the fields serde_json would have read.

use std::borrow::Cow;

use super::WireIn;

/// The known fields, in the order the encoder writes them.
const FIELDS: [&str; 14] = [
    "v",
    "deviceId",
    "seq",
    "ts",
    "lat",
    "lon",
    "altM",
    "headingDeg",
    "speedMps",
    "batteryPct",
    "fix",
    "sats",
    "satsVisible",
    "hAccM",
];

/// Each of [`FIELDS`] as the encoder writes its key (quoted, with the colon), for one
/// comparison with the next 16 bytes of a message.
const KEYS: [Key; 14] = [
    Key::new(br#""v":"#),
    Key::new(br#""deviceId":"#),
    Key::new(br#""seq":"#),
    Key::new(br#""ts":"#),
    Key::new(br#""lat":"#),
    Key::new(br#""lon":"#),
    Key::new(br#""altM":"#),
    Key::new(br#""headingDeg":"#),
    Key::new(br#""speedMps":"#),
    Key::new(br#""batteryPct":"#),
    Key::new(br#""fix":"#),
    Key::new(br#""sats":"#),
    Key::new(br#""satsVisible":"#),
    Key::new(br#""hAccM":"#),
];

/// A key of at most 16 bytes as a little-endian number, and the mask of its bytes.
struct Key {
    word: u128,
    mask: u128,
    len: usize,
}

impl Key {
    const fn new(text: &[u8]) -> Key {
        assert!(text.len() < 16);
        let mut word = 0;
        let mut i = 0;
        while i < text.len() {
            word |= (text[i] as u128) << (8 * i);
            i += 1;
        }
        Key {
            word,
            mask: (1 << (8 * text.len())) - 1,
            len: text.len(),
        }
    }

    /// Whether `bytes` starts with this key (`false` when fewer than 16 bytes are left:
    /// the key is then read the general way).
    fn starts(&self, bytes: &[u8]) -> bool {
        bytes
            .first_chunk::<16>()
            .is_some_and(|chunk| u128::from_le_bytes(*chunk) & self.mask == self.word)
    }
}

/// Reads `bytes` as a flat version 1 message, or gives up (see the module doc).
pub(super) fn scan(bytes: &[u8]) -> Option<WireIn<'_>> {
    // One pass over the whole message is cheaper than one per string.
    let text = std::str::from_utf8(bytes).ok()?;
    let mut s = Scanner {
        text,
        bytes,
        pos: 0,
    };
    let mut raw = WireIn::default();
    // Which of FIELDS were read (serde_json rejects a field given twice), and which
    // one usually comes next.
    let mut seen = 0u16;
    let mut next = 0;
    s.skip_ws();
    s.expect(b'{')?;
    s.skip_ws();
    if !s.consume(b'}') {
        // Each member starts at its key, or at whitespace before it.
        loop {
            let field = match KEYS.get(next) {
                // The key the encoder writes next, compared in one go.
                Some(key) if key.starts(&bytes[s.pos..]) => {
                    s.pos += key.len;
                    Some(next)
                }
                _ => {
                    s.skip_ws();
                    let key = s.string()?;
                    s.skip_ws();
                    s.expect(b':')?;
                    FIELDS.iter().position(|field| *field == key)
                }
            };
            s.skip_ws();
            let Some(field) = field else {
                // Unknown fields are ignored, and may repeat.
                s.skip_scalar()?;
                if s.end_of_member()? {
                    break;
                }
                continue;
            };
            match field {
                0 => raw.v = s.or_null(Scanner::uint)?,
                1 => raw.device_id = s.or_null(Scanner::str)?,
                2 => raw.seq = s.or_null(Scanner::uint)?,
                3 => raw.ts = s.or_null(Scanner::str)?,
                4 => raw.lat = s.or_null(Scanner::float)?,
                5 => raw.lon = s.or_null(Scanner::float)?,
                6 => raw.alt_m = s.or_null(Scanner::float)?,
                7 => raw.heading_deg = s.or_null(Scanner::float)?,
                8 => raw.speed_mps = s.or_null(Scanner::float)?,
                9 => raw.battery_pct = s.or_null(Scanner::uint)?,
                10 => raw.fix = s.or_null(Scanner::str)?,
                11 => raw.sats = s.or_null(Scanner::uint)?,
                12 => raw.sats_visible = s.or_null(Scanner::uint)?,
                _ => raw.h_acc_m = s.or_null(Scanner::float)?,
            }
            if seen & 1 << field != 0 {
                return None;
            }
            seen |= 1 << field;
            next = field + 1;
            if s.end_of_member()? {
                break;
            }
        }
    }
    s.skip_ws();
    (s.pos == bytes.len()).then_some(raw)
}

/// Bytes a string may hold on the fast path: all but `"`, `\` and control characters
/// (which JSON allows only escaped).
const PLAIN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0x20;
    while b < 256 {
        table[b] = b != b'"' as usize && b != b'\\' as usize;
        b += 1;
    }
    table
};

/// Powers of ten that are exact in an `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The largest integer up to which every integer is exact in an `f64`.
const MAX_EXACT_INT: u64 = 1 << 53;

/// Reads the ASCII digits of `bytes` from `at` on, appending them to `value` (wrapping
/// on overflow); returns the value and the index after the last digit.
fn digits(bytes: &[u8], mut at: usize, mut value: u64) -> (u64, usize) {
    while let Some(&d) = bytes.get(at).filter(|d| d.is_ascii_digit()) {
        value = value.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
        at += 1;
    }
    (value, at)
}

/// A position in the message.
struct Scanner<'a> {
    text: &'a str,
    /// `text` as bytes.
    bytes: &'a [u8],
    pos: usize,
}

/// A JSON number as read: its text and the parts of its value.
struct Number<'a> {
    text: &'a str,
    negative: bool,
    /// The digits of the integer and fraction parts as one integer (exact when `digits <= 19`).
    mantissa: u64,
    /// How many digits `mantissa` holds.
    digits: u32,
    /// The power of ten to scale `mantissa` by (saturating).
    exponent: i32,
    /// Whether the number has a fraction or an exponent (serde_json then reads a float).
    is_float: bool,
}

impl Number<'_> {
    /// The number as an `f64`, correctly rounded; `None` if out of range (serde_json
    /// rejects numbers that overflow to infinity).
    fn to_f64(&self) -> Option<f64> {
        let e = self.exponent.unsigned_abs() as usize;
        let value = if self.digits <= 19 && self.mantissa <= MAX_EXACT_INT && e < POW10.len() {
            // Both operands are exact, so the one correctly rounded operation is exact too.
            let mantissa = self.mantissa as f64;
            if self.exponent < 0 {
                mantissa / POW10[e]
            } else {
                mantissa * POW10[e]
            }
        } else {
            // JSON's number syntax is a subset of what `f64::from_str` reads, exactly.
            let value: f64 = self.text.parse().ok()?;
            return value.is_finite().then_some(value);
        };
        Some(if self.negative { -value } else { value })
    }
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    /// Consumes `b` if it comes next.
    fn consume(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        self.pos += usize::from(found);
        found
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        self.consume(b).then_some(())
    }

    /// Skips JSON whitespace.
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// After a member: `true` at the object's end, `false` after a comma.
    fn end_of_member(&mut self) -> Option<bool> {
        loop {
            match self.next()? {
                b',' => return Some(false),
                b'}' => return Some(true),
                b' ' | b'\n' | b'\t' | b'\r' => {}
                _ => return None,
            }
        }
    }

    /// Consumes `literal` if it comes next.
    fn literal(&mut self, literal: &[u8]) -> Option<()> {
        let end = self.pos + literal.len();
        (self.bytes.get(self.pos..end)? == literal).then(|| self.pos = end)
    }

    /// `null` (as `None`) or what `read` reads.
    fn or_null<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            Some(None)
        } else {
            read(self).map(Some)
        }
    }

    /// A string of [`PLAIN`] bytes, without its quotes.
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let start = self.pos;
        let len = self.bytes[start..]
            .iter()
            .position(|&b| !PLAIN[usize::from(b)])?;
        self.pos = start + len;
        self.expect(b'"')?;
        // Quotes are ASCII, so they are character boundaries.
        self.text.get(start..start + len)
    }

    /// A string, borrowed.
    fn str(&mut self) -> Option<Cow<'a, str>> {
        self.string().map(Cow::Borrowed)
    }

    /// A number in JSON syntax (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`).
    fn number(&mut self) -> Option<Number<'a>> {
        let bytes = self.bytes;
        let start = self.pos;
        let negative = self.consume(b'-');
        let int_start = self.pos;
        let (mut mantissa, mut i) = digits(bytes, int_start, 0);
        match i - int_start {
            0 => return None,
            1 => {}
            _ if bytes[int_start] == b'0' => return None, // a leading zero
            _ => {}
        }
        // The leading zero of `0` or `0.x` is not a significant digit.
        let mut count = if bytes[int_start] == b'0' {
            0
        } else {
            i - int_start
        };
        let mut exponent = 0i32;
        let mut is_float = false;
        if bytes.get(i) == Some(&b'.') {
            is_float = true;
            let fraction_start = i + 1;
            (mantissa, i) = digits(bytes, fraction_start, mantissa);
            let fraction_digits = i - fraction_start;
            if fraction_digits == 0 {
                return None;
            }
            count += fraction_digits;
            exponent = -i32::try_from(fraction_digits).unwrap_or(i32::MAX);
        }
        if let Some(b'e' | b'E') = bytes.get(i) {
            is_float = true;
            i += 1;
            let negative_exp = bytes.get(i) == Some(&b'-');
            if let Some(b'-' | b'+') = bytes.get(i) {
                i += 1;
            }
            let exp_start = i;
            let mut exp = 0i32;
            while let Some(&d) = bytes.get(i).filter(|d| d.is_ascii_digit()) {
                exp = exp.saturating_mul(10).saturating_add(i32::from(d - b'0'));
                i += 1;
            }
            if i == exp_start {
                return None;
            }
            exponent = if negative_exp {
                exponent.saturating_sub(exp)
            } else {
                exponent.saturating_add(exp)
            };
        }
        self.pos = i;
        Some(Number {
            text: self.text.get(start..i)?,
            negative,
            mantissa,
            digits: u32::try_from(count).unwrap_or(u32::MAX),
            exponent,
            is_float,
        })
    }

    /// A number read into an `f64`.
    fn float(&mut self) -> Option<f64> {
        self.number()?.to_f64()
    }

    /// A non-negative integer of at most 19 digits, which always fits a `u64` (to
    /// serde_json, a sign, fraction or exponent makes a number that is not a `u64`).
    fn uint(&mut self) -> Option<u64> {
        let number = self.number()?;
        (!number.negative && !number.is_float && number.digits <= 19).then_some(number.mantissa)
    }

    /// Skips a `null`, boolean, number or string value (nested values are left to the
    /// reference decoder).
    fn skip_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.number().map(drop),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const EXAMPLE: &[u8] = br#"{"v":1,"deviceId":"drone-0042","seq":1834,"ts":"2026-11-22T09:15:02.500Z","lat":47.6205,"lon":-122.3493,"altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81,"fix":"rtkFixed","sats":12,"satsVisible":14,"hAccM":0.02}"#;

    /// The fast path's reading of a number as the value of `lat`.
    fn scan_lat(number: &str) -> Option<Option<f64>> {
        scan(format!(r#"{{"lat":{number}}}"#).as_bytes()).map(|raw| raw.lat)
    }

    /// serde_json's reading of a number as an `f64` (with `float_roundtrip`).
    fn serde_f64(number: &str) -> Option<f64> {
        serde_json::from_str(number).ok()
    }

    #[test]
    fn scans_the_example() {
        let raw = scan(EXAMPLE).unwrap();
        assert_eq!(raw.v, Some(1));
        assert_eq!(raw.device_id.as_deref(), Some("drone-0042"));
        assert!(matches!(raw.device_id, Some(Cow::Borrowed(_))));
        assert_eq!(raw.seq, Some(1834));
        assert_eq!(raw.ts.as_deref(), Some("2026-11-22T09:15:02.500Z"));
        assert_eq!(raw.lat, Some(47.6205));
        assert_eq!(raw.lon, Some(-122.3493));
        assert_eq!(raw.alt_m, Some(121.5));
        assert_eq!(raw.heading_deg, Some(270.0));
        assert_eq!(raw.speed_mps, Some(12.3));
        assert_eq!(raw.battery_pct, Some(81));
        assert_eq!(raw.fix.as_deref(), Some("rtkFixed"));
        assert_eq!(raw.sats, Some(12));
        assert_eq!(raw.sats_visible, Some(14));
        assert_eq!(raw.h_acc_m, Some(0.02));
    }

    #[test]
    fn scans_whitespace_nulls_and_unknown_scalars() {
        let text = " {\t\"v\" : 1 ,\r\n\"altM\":null, \"fw\":\"4.5\",\"ok\":true,\"bad\":false,\
                    \"n\":null,\"x\":-1.5e-3,\"fw\":\"again\"} \n";
        let raw = scan(text.as_bytes()).unwrap();
        assert_eq!(raw.v, Some(1));
        assert_eq!(raw.alt_m, None);
        let unicode =
            scan("{\"fw\":\"caf\u{e9}\",\"caf\u{e9}\":1,\"deviceId\":\"\u{e9}\"}".as_bytes());
        assert_eq!(unicode.unwrap().device_id.as_deref(), Some("\u{e9}"));
        assert!(scan(b"{\"fw\":\"\xff\"}").is_none());
        let empty = scan(b"{}").unwrap();
        assert_eq!(empty.v, None);
    }

    #[test]
    fn gives_up_on_what_it_does_not_handle() {
        for text in [
            &br#"{"deviceId":"a\u0062"}"#[..],
            br#"{"l\u0061t":1}"#,
            br#"{"fw":"\n"}"#,
            "{\"fw\":\"a\tb\"}".as_bytes(),
            br#"{"fw":{"build":1}}"#,
            br#"{"fw":[1]}"#,
            br#"{"v":1,"v":1}"#,
            br#"{"altM":null,"altM":null}"#,
            br#"{"sats":1,"sats":1}"#,
            br#"{"fix":3}"#,
            br#"{"fix":"3\u0064"}"#,
            br#"{"sats":-1}"#,
            br#"{"sats":1.0}"#,
            br#"{"v":1.0}"#,
            br#"{"v":1e0}"#,
            br#"{"v":-0}"#,
            br#"{"seq":18446744073709551615}"#,
            br#"{"v":01}"#,
            br#"{"lat":1e400}"#,
            br#"{"lat":-1e400}"#,
            br#"{"lat":.5}"#,
            br#"{"lat":1.}"#,
            br#"{"lat":1e}"#,
            br#"{"lat":+1}"#,
            br#"{"lat":"1"}"#,
            br#"{"ts":1}"#,
            br#"{"v":1,}"#,
            br#"{"v":1} x"#,
            br#"{"v":1}}"#,
            br#"{"v":nul}"#,
            b"{\"v\":1}\x0c",
            "\u{feff}{}".as_bytes(),
            br#"[1]"#,
            b"",
            b"{",
        ] {
            assert!(scan(text).is_none(), "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn number_forms_are_read_as_serde_json_reads_them() {
        for number in [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "1e2",
            "1E+2",
            "1.0E-5",
            "-1e-400",
            "1e-400",
            "0e999999999999",
            "123456789012345678901234567890",
            "9007199254740993",
            "0.1",
            "47.620512300000000000001",
            "2.2250738585072011e-308",
            "4.9e-324",
            "1.7976931348623157e308",
            "18446744073709551616",
        ] {
            let fast = scan_lat(number).unwrap().unwrap();
            let reference = serde_f64(number).unwrap();
            assert_eq!(fast.to_bits(), reference.to_bits(), "{number}");
        }
    }

    proptest! {
        #[test]
        fn written_floats_are_read_exactly(value in {
            use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
            POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO
        }) {
            for text in [serde_json::to_string(&value).unwrap(), format!("{value:e}"), format!("{value:?}")] {
                let fast = scan_lat(&text).unwrap().unwrap();
                prop_assert_eq!(fast.to_bits(), value.to_bits(), "{}", text);
            }
        }

        #[test]
        fn numbers_are_read_as_serde_json_reads_them(
            number in "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,4})?"
        ) {
            match (scan_lat(&number), serde_f64(&number)) {
                (Some(Some(fast)), Some(reference)) => {
                    prop_assert_eq!(fast.to_bits(), reference.to_bits(), "{}", number);
                }
                (None, None) => {}
                (fast, reference) => {
                    prop_assert!(false, "{}: fast {:?}, serde_json {:?}", number, fast, reference);
                }
            }
        }
    }
}

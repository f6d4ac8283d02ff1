//! Reading the per-operation results of a batch response (HTTP 200 or 207).
//!
//! A fast path reads the compact shape the service writes — no whitespace, the fields
//! `statusCode`, `subStatusCode`, `requestCharge`, `retryAfterMilliseconds` and `eTag` — in
//! one pass without serde's machinery; anything else (whitespace, other fields such as
//! `resourceBody`, escapes other than `\"` and `\\`, duplicates, malformed input) falls back to
//! [`parse_statuses`], so both paths agree on every input.

use cosmos_wire::batch::{OperationStatus, parse_statuses};

/// Parses the body of a batch response into results without documents.
pub(super) fn parse(body: &[u8]) -> Result<Vec<OperationStatus>, serde_json::Error> {
    match fast(body) {
        Some(results) => Ok(results),
        None => parse_statuses(body),
    }
}

/// The fast path: `None` unless the body has the compact shape.
fn fast(body: &[u8]) -> Option<Vec<OperationStatus>> {
    Cursor { bytes: body, at: 0 }.results()
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    fn results(mut self) -> Option<Vec<OperationStatus>> {
        self.eat(b'[')?;
        let mut out = Vec::with_capacity(cosmos_wire::batch::MAX_OPERATIONS);
        if self.bytes.get(self.at) == Some(&b']') {
            self.at += 1;
        } else {
            loop {
                out.push(self.result()?);
                match self.next()? {
                    b',' => {}
                    b']' => break,
                    _ => return None,
                }
            }
        }
        (self.at == self.bytes.len()).then_some(out)
    }

    fn result(&mut self) -> Option<OperationStatus> {
        self.eat(b'{')?;
        let mut result = OperationStatus {
            status_code: 0,
            sub_status_code: 0,
            request_charge: 0.0,
            retry_after_milliseconds: None,
            e_tag: None,
        };
        // One bit per field seen: serde refuses duplicates, and `statusCode` is required.
        let mut seen = 0u8;
        if self.bytes.get(self.at) == Some(&b'}') {
            return None;
        }
        loop {
            let key = self.plain_string()?;
            self.eat(b':')?;
            let bit = match key {
                b"statusCode" => {
                    result.status_code = self.number()?.parse().ok()?;
                    1
                }
                b"subStatusCode" => {
                    result.sub_status_code = self.number()?.parse().ok()?;
                    2
                }
                b"requestCharge" => {
                    let charge: f64 = self.number()?.parse().ok()?;
                    // serde refuses numbers out of the f64 range.
                    result.request_charge = charge.is_finite().then_some(charge)?;
                    4
                }
                b"retryAfterMilliseconds" => {
                    result.retry_after_milliseconds = Some(self.number()?.parse().ok()?);
                    8
                }
                b"eTag" => {
                    result.e_tag = Some(self.string()?);
                    16
                }
                _ => return None,
            };
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            match self.next()? {
                b',' => {}
                b'}' => break,
                _ => return None,
            }
        }
        (seen & 1 != 0).then_some(result)
    }

    /// A string without escapes, as its bytes.
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.at;
        loop {
            match self.next()? {
                b'"' => return Some(&self.bytes[start..self.at - 1]),
                b'\\' => return None,
                c if c < 0x20 => return None,
                _ => {}
            }
        }
    }

    /// A string whose only escapes are `\"` and `\\`.
    fn string(&mut self) -> Option<String> {
        self.eat(b'"')?;
        let start = self.at;
        let mut escaped = false;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => break,
                // The escaped byte is checked by `unescape`; it is never the closing quote.
                b'\\' => {
                    escaped = true;
                    self.at += 2;
                }
                c if c < 0x20 => return None,
                _ => self.at += 1,
            }
        }
        let raw = &self.bytes[start..self.at];
        self.at += 1;
        let text = if escaped {
            unescape(raw)?
        } else {
            raw.to_vec()
        };
        String::from_utf8(text).ok()
    }

    /// A JSON number's text: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> Option<&'a str> {
        let start = self.at;
        let digits = |c: &mut Self| {
            let from = c.at;
            while c.bytes.get(c.at).is_some_and(u8::is_ascii_digit) {
                c.at += 1;
            }
            c.at > from
        };
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let int = self.at;
        if !digits(self) || (self.bytes[int] == b'0' && self.at - int > 1) {
            return None;
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if !digits(self) {
                return None;
            }
        }
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.bytes.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        std::str::from_utf8(&self.bytes[start..self.at]).ok()
    }
}

/// The text of a string whose only escapes are `\"` and `\\`.
fn unescape(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw.iter();
    while let Some(&c) = bytes.next() {
        if c == b'\\' {
            match bytes.next()? {
                c @ (b'"' | b'\\') => out.push(*c),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn same(a: &[OperationStatus], b: &[OperationStatus]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                let close = (x.request_charge - y.request_charge).abs()
                    <= 1e-12 * x.request_charge.abs().max(1.0);
                x.status_code == y.status_code
                    && x.sub_status_code == y.sub_status_code
                    && x.retry_after_milliseconds == y.retry_after_milliseconds
                    && x.e_tag == y.e_tag
                    && close
            })
    }

    #[test]
    fn reads_the_compact_shape_and_falls_back_for_the_rest() {
        let body = br#"[{"statusCode":201,"requestCharge":5.71,"eTag":"\"00-1\""},{"statusCode":429,"requestCharge":0,"subStatusCode":3200,"retryAfterMilliseconds":120},{"statusCode":410,"subStatusCode":1002}]"#;
        let read = fast(body).expect("the compact shape takes the fast path");
        assert_eq!(read, parse_statuses(body).unwrap());
        assert_eq!(read[0].e_tag.as_deref(), Some("\"00-1\""));
        assert_eq!(read[1].retry_after_milliseconds, Some(120));
        assert_eq!(read[2].sub_status_code, 1002);

        let pretty = br#"[ {"statusCode": 200, "resourceBody": {"id": "a"}} ]"#;
        assert!(fast(pretty).is_none());
        assert_eq!(parse(pretty).unwrap()[0].status_code, 200);
        assert!(parse(br#"[{"statusCode":200}"#).is_err());
        assert!(
            parse(br#"[{"requestCharge":1}]"#).is_err(),
            "statusCode required"
        );
        assert_eq!(parse(b"[]").unwrap(), Vec::new());
    }

    fn status() -> impl Strategy<Value = OperationStatus> {
        (
            prop::sample::select(vec![
                200u16, 201, 204, 400, 404, 409, 410, 412, 429, 449, 503,
            ]),
            prop::sample::select(vec![0u32, 1002, 1007, 3200]),
            0.0f64..1e4,
            prop::option::of(0u64..100_000),
            prop::option::of("[ -~é]{0,20}"),
        )
            .prop_map(|(status, sub, charge, retry, etag)| OperationStatus {
                status_code: status,
                sub_status_code: sub,
                request_charge: charge,
                retry_after_milliseconds: retry,
                e_tag: etag,
            })
    }

    fn write(statuses: &[OperationStatus]) -> Vec<u8> {
        let items: Vec<serde_json::Value> = statuses
            .iter()
            .map(|s| {
                let mut o = serde_json::json!({
                    "statusCode": s.status_code,
                    "requestCharge": s.request_charge,
                });
                if s.sub_status_code != 0 {
                    o["subStatusCode"] = s.sub_status_code.into();
                }
                if let Some(r) = s.retry_after_milliseconds {
                    o["retryAfterMilliseconds"] = r.into();
                }
                if let Some(e) = &s.e_tag {
                    o["eTag"] = e.clone().into();
                }
                o
            })
            .collect();
        serde_json::to_vec(&items).unwrap()
    }

    proptest! {
        #[test]
        fn compact_bodies_read_as_serde_reads_them(statuses in prop::collection::vec(status(), 0..20)) {
            let body = write(&statuses);
            let parsed = parse(&body).unwrap();
            prop_assert!(same(&parsed, &parse_statuses(&body).unwrap()));
            prop_assert!(same(&parsed, &statuses));
        }

        #[test]
        fn any_edit_reads_as_serde_reads_it(
            statuses in prop::collection::vec(status(), 1..5),
            at in any::<prop::sample::Index>(),
            byte in prop::sample::select(b" ,:{}[]\"\\0123456789.eE+-xa".to_vec()),
            insert in any::<bool>(),
        ) {
            let mut body = write(&statuses);
            let i = at.index(body.len());
            if insert { body.insert(i, byte) } else { body[i] = byte }
            match (parse(&body), parse_statuses(&body)) {
                (Ok(a), Ok(b)) => prop_assert!(same(&a, &b)),
                (Err(_), Err(_)) => {}
                (a, b) => prop_assert!(false, "{:?} vs {:?} for {}", a, b, String::from_utf8_lossy(&body)),
            }
        }
    }
}

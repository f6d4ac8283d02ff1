//! Differential tests: `decode` (a fast scanner with a fallback) returns exactly what
//! `decode_reference` (serde_json) returns, for valid, invalid and unusual messages.

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};
use telemetry::time::MillisTime;
use telemetry::wire::{FixType, Gnss, Invalid, Position, decode, decode_reference};

/// Both decoders agree exactly: the same error, or positions with bit-identical floats.
fn assert_same(bytes: &[u8]) -> Result<(), TestCaseError> {
    let fast = decode(bytes);
    let reference = decode_reference(bytes);
    // Debug prints each f64 in its shortest round-trip form, distinct for distinct bits
    // (`-0.0` and `0.0` included), so equal text means bit-identical values.
    prop_assert_eq!(
        format!("{fast:?}"),
        format!("{reference:?}"),
        "{:?}",
        String::from_utf8_lossy(bytes)
    );
    prop_assert_eq!(fast, reference);
    Ok(())
}

fn finite() -> impl Strategy<Value = f64> {
    use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO
}

fn millis_time() -> impl Strategy<Value = DateTime<Utc>> {
    (-62_167_219_200_000i64..=253_402_300_799_999)
        .prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap())
}

prop_compose! {
    fn position()(
        device_id in "[A-Za-z0-9\\-:.+%_#*?!(),=@;$']{1,128}",
        seq in any::<u64>(),
        ts in millis_time(),
        lat in -90.0f64..=90.0,
        lon in -180.0f64..=180.0,
        alt_m in proptest::option::of(finite()),
        heading_deg in proptest::option::of(finite()),
        speed_mps in proptest::option::of(finite()),
        battery_pct in proptest::option::of(0u8..=100),
        gnss in gnss(),
    ) -> Position {
        Position { device_id, seq, ts, lat, lon, alt_m, heading_deg, speed_mps, battery_pct, gnss }
    }
}

/// GNSS health: any combination of members, accuracies of any finite non-negative value.
fn gnss() -> impl Strategy<Value = Gnss> {
    (
        proptest::option::of(select(FixType::ALL.to_vec())),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(finite().prop_map(f64::abs)),
    )
        .prop_map(|(fix, sats, sats_visible, h_acc_m)| Gnss {
            fix,
            sats,
            sats_visible,
            h_acc_m,
        })
}

/// The text of a JSON number, in every form the grammar allows and some it does not.
fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,4})?",
        1 => any::<u64>().prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => finite().prop_map(|f| serde_json::to_string(&f).unwrap()),
        1 => finite().prop_map(|f| format!("{f:e}")),
        3 => select(vec![
            "0", "-0", "0.0", "-0.0", "1e2", "1E+2", "1.0E-5", "1e400", "-1e400", "1e-400",
            "-1e-400", "0e99999999999", "1e99999999999", "1e-99999999999", "90", "90.0",
            "90.00000000000001", "-180", "100", "101", "255", "256", "18446744073709551615",
            "18446744073709551616", "9007199254740993", "01", "-01", "1.", ".5", "+1", "-", "1e",
            "1e+", "0x10", "NaN", "Infinity", "1_0", "00",
        ])
        .prop_map(str::to_owned),
    ]
}

/// The text of a JSON string, with and without escapes, control and non-ASCII characters.
fn string_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9\\-:.+%_#*?!(),=@;$']{0,12}".prop_map(|s| format!("\"{s}\"")),
        millis_time().prop_map(|t| format!("\"{}\"", MillisTime(t))),
        select(vec![
            r#""drone-0042""#,
            r#""drone\u002d0042""#,
            r#""drone\n1""#,
            r#""a\"b""#,
            r#""a\\b""#,
            r#""a\/b""#,
            r#""\ud83d\ude00""#,
            r#""\ud800""#,
            r#""\x""#,
            "\"caf\u{e9}\"",
            "\"tab\there\"",
            "\"2026-11-22T09:15:02.500Z\"",
            "\"2026-11-22T10:15:02.500+01:00\"",
            "\"2026-11-22t09:15:02.500z\"",
            "\"2016-12-31T23:59:60.250Z\"",
            "\"2026-02-30T09:15:02Z\"",
            "\"10000-01-01T00:00:00Z\"",
            "\"\"",
            "\"unterminated",
            "\"3d\"",
            "\"rtkFixed\"",
            "\"RTKFIXED\"",
            "\"ppp\"",
            "\"3\\u0064\"",
        ])
        .prop_map(str::to_owned),
    ]
}

/// The text of any JSON value (and some non-values).
fn value_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => number_text(),
        3 => string_text(),
        2 => select(vec![
            "null", "true", "false", "nul", "True", "{}", "[]", "[1,2]", r#"{"a":[1,{"b":null}]}"#,
            r#"{"a":"#, "[", "]", "}", "", ",",
        ])
        .prop_map(str::to_owned),
    ]
}

/// A key: every known field, unknown ones, escaped and near-miss spellings.
fn key_text() -> impl Strategy<Value = String> {
    select(vec![
        r#""v""#,
        r#""deviceId""#,
        r#""seq""#,
        r#""ts""#,
        r#""lat""#,
        r#""lon""#,
        r#""altM""#,
        r#""headingDeg""#,
        r#""speedMps""#,
        r#""batteryPct""#,
        r#""fix""#,
        r#""sats""#,
        r#""satsVisible""#,
        r#""hAccM""#,
        r#""fw""#,
        r#""extra""#,
        r#""""#,
        r#""Lat""#,
        r#""lat ""#,
        r#""l\u0061t""#,
        r#""\u0076""#,
        "\"h\u{e9}\"",
        "lat",
        "1",
    ])
    .prop_map(str::to_owned)
}

/// Whitespace JSON allows, and some it does not.
fn space() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        8 => Just(""),
        2 => select(vec![" ", "\t", "\n", "\r", "\r\n  "]),
        1 => select(vec!["\u{a0}", "\x0c", "\u{feff}", "\x0b"]),
    ]
}

prop_compose! {
    /// A message assembled from tokens: mostly well-formed objects of scalar fields.
    fn token_message()(
        members in proptest::collection::vec((space(), key_text(), space(), space(), value_text(), space()), 0..12),
        open in prop_oneof![8 => Just("{"), 1 => select(vec!["[", "", "{{", "\u{feff}{"])],
        close in prop_oneof![8 => Just("}"), 1 => select(vec!["", ",}", "}}", "} x", "]"])],
        outer in (space(), space()),
    ) -> String {
        let body: Vec<String> = members
            .into_iter()
            .map(|(a, key, b, c, value, d)| format!("{a}{key}{b}:{c}{value}{d}"))
            .collect();
        format!("{}{open}{}{close}{}", outer.0, body.join(","), outer.1)
    }
}

/// A valid message with one field replaced by an arbitrary value text.
fn field_replaced() -> impl Strategy<Value = String> {
    (position(), key_text(), value_text()).prop_map(|(p, key, value)| {
        let text = String::from_utf8(p.encode().unwrap()).unwrap();
        // Replace the value if the key is present, otherwise add the field.
        match text.find(&format!("{key}:")) {
            Some(at) => {
                let start = at + key.len() + 1;
                let end = start
                    + text[start..]
                        .find([',', '}'])
                        .expect("a flat message ends each value with , or }");
                format!("{}{value}{}", &text[..start], &text[end..])
            }
            None => format!("{{{key}:{value},{}", &text[1..]),
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn agrees_on_encoded_positions(p in position()) {
        let bytes = p.encode().unwrap();
        assert_same(&bytes)?;
        prop_assert_eq!(decode(&bytes), Ok(p));
    }

    #[test]
    fn agrees_on_token_messages(text in token_message()) {
        assert_same(text.as_bytes())?;
    }

    #[test]
    fn agrees_on_replaced_fields(text in field_replaced()) {
        assert_same(text.as_bytes())?;
    }

    #[test]
    fn agrees_on_duplicated_fields(p in position(), key in key_text(), value in value_text()) {
        let text = String::from_utf8(p.encode().unwrap()).unwrap();
        let doubled = format!("{{{key}:{value},{key}:{value},{}", &text[1..]);
        assert_same(doubled.as_bytes())?;
    }

    #[test]
    fn agrees_on_byte_mutations(
        p in position(),
        edits in proptest::collection::vec(
            (any::<prop::sample::Index>(), 0u8..3, select(b"{}[]\":,.-+eE0123456789tnfaslu\\ \t\n\x00\x0c\x7f\xc3\xa9\xff".to_vec())),
            1..6,
        ),
    ) {
        let mut bytes = p.encode().unwrap();
        for (at, op, byte) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => { bytes.remove(i); }
                _ if i < bytes.len() => bytes[i] = byte,
                _ => bytes.push(byte),
            }
        }
        assert_same(&bytes)?;
    }

    #[test]
    fn agrees_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        assert_same(&bytes)?;
    }

    #[test]
    fn agrees_on_nested_unknown_fields(p in position(), value in any::<bool>().prop_map(|b| json!({"x": [b, null, 1.5e-3, "\u{e9}"]}))) {
        let mut message: Value = serde_json::from_slice(&p.encode().unwrap()).unwrap();
        message["firmware"] = value;
        let bytes = serde_json::to_vec(&message).unwrap();
        assert_same(&bytes)?;
        prop_assert_eq!(decode(&bytes), Ok(p));
    }
}

#[test]
fn agrees_on_the_size_limit_and_messages_at_it() {
    let example = r#"{"v":1,"deviceId":"drone-0042","seq":1834,"ts":"2026-11-22T09:15:02.500Z","lat":47.6205,"lon":-122.3493}"#;
    let padded = |n: usize| {
        example.replace(
            "\"v\":1,",
            &format!("\"pad\":\"{}\",\"v\":1,", "x".repeat(n)),
        )
    };
    let base = padded(0).len();
    let limit = telemetry::wire::MAX_MESSAGE_BYTES;
    for text in [padded(limit - base), padded(limit - base + 1)] {
        let bytes = text.as_bytes();
        assert_eq!(decode(bytes), decode_reference(bytes));
    }
    assert!(matches!(
        decode(padded(limit - base + 1).as_bytes()),
        Err(Invalid::TooLarge { .. })
    ));
}

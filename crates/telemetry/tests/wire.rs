//! Wire message examples and boundaries.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use telemetry::order::PositionOrder;
use telemetry::time::TimeError;
use telemetry::wire::{
    DeviceIdError, Invalid, InvalidReason, MAX_MESSAGE_BYTES, Position, WIRE_VERSION,
    check_device_id, decode,
};

const EXAMPLE: &str = r#"{"v":1,"deviceId":"drone-0042","seq":1834,"ts":"2026-11-22T09:15:02.500Z","lat":47.6205,"lon":-122.3493,"altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81}"#;

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

fn example() -> Position {
    Position {
        device_id: "drone-0042".into(),
        seq: 1834,
        ts: utc("2026-11-22T09:15:02.500Z"),
        lat: 47.6205,
        lon: -122.3493,
        alt_m: Some(121.5),
        heading_deg: Some(270.0),
        speed_mps: Some(12.3),
        battery_pct: Some(81),
        gnss: Default::default(),
    }
}

/// The example message with `field` set to `value` (or removed when `value` is `None`).
fn example_with(field: &str, value: Option<Value>) -> Vec<u8> {
    let mut message: Value = serde_json::from_str(EXAMPLE).unwrap();
    let object = message.as_object_mut().unwrap();
    match value {
        Some(value) => object.insert(field.to_owned(), value),
        None => object.remove(field),
    };
    serde_json::to_vec(&message).unwrap()
}

#[test]
fn decodes_the_issue_example() {
    assert_eq!(decode(EXAMPLE.as_bytes()), Ok(example()));
}

#[test]
fn encodes_the_issue_example_byte_for_byte() {
    assert_eq!(
        String::from_utf8(example().encode().unwrap()).unwrap(),
        EXAMPLE
    );
}

#[test]
fn optional_fields_may_be_absent_or_null_and_are_not_written_when_absent() {
    let minimal = br#"{"v":1,"deviceId":"d","seq":0,"ts":"2026-11-22T09:15:02Z","lat":0,"lon":0}"#;
    let position = decode(minimal).unwrap();
    assert_eq!(position.alt_m, None);
    assert_eq!(position.battery_pct, None);
    assert_eq!(
        String::from_utf8(position.encode().unwrap()).unwrap(),
        r#"{"v":1,"deviceId":"d","seq":0,"ts":"2026-11-22T09:15:02.000Z","lat":0.0,"lon":0.0}"#
    );
    let nulls = example_with("altM", Some(Value::Null));
    assert_eq!(decode(&nulls).unwrap().alt_m, None);
}

#[test]
fn unknown_fields_are_ignored() {
    let message = example_with("firmware", Some(json!({"build": [1, 2, {"x": null}]})));
    assert_eq!(decode(&message), Ok(example()));
}

#[test]
fn each_required_field_is_reported_missing() {
    for field in ["v", "deviceId", "seq", "ts", "lat", "lon"] {
        let message = example_with(field, None);
        assert_eq!(
            decode(&message),
            Err(Invalid::MissingField { field }),
            "{field}"
        );
        let message = example_with(field, Some(Value::Null));
        assert_eq!(
            decode(&message),
            Err(Invalid::MissingField { field }),
            "{field}"
        );
    }
}

#[test]
fn other_major_versions_are_rejected_with_the_version() {
    let message = example_with("v", Some(json!(2)));
    assert_eq!(
        decode(&message),
        Err(Invalid::UnsupportedVersion { found: 2 })
    );
    // Even when the rest does not look like version 1 at all.
    let v2 = br#"{"v":2,"device":{"id":"x"},"lat":"north"}"#;
    let err = decode(v2).unwrap_err();
    assert_eq!(err, Invalid::UnsupportedVersion { found: 2 });
    assert_eq!(err.reason(), InvalidReason::Version);
    assert!(err.to_string().contains('2'), "{err}");
    assert_eq!(
        decode(&example_with("v", Some(json!(0)))),
        Err(Invalid::UnsupportedVersion { found: 0 })
    );
    assert_eq!(WIRE_VERSION, 1);
}

#[test]
fn latitude_boundaries() {
    for ok in [90.0, -90.0, 0.0] {
        assert!(
            decode(&example_with("lat", Some(json!(ok)))).is_ok(),
            "{ok}"
        );
    }
    for bad in [90.0001, -90.0001, 1e300] {
        assert_eq!(
            decode(&example_with("lat", Some(json!(bad)))),
            Err(Invalid::Latitude { value: bad })
        );
    }
}

#[test]
fn longitude_boundaries() {
    for ok in [180.0, -180.0] {
        assert!(
            decode(&example_with("lon", Some(json!(ok)))).is_ok(),
            "{ok}"
        );
    }
    for bad in [180.0001, -180.0001] {
        assert_eq!(
            decode(&example_with("lon", Some(json!(bad)))),
            Err(Invalid::Longitude { value: bad })
        );
    }
}

#[test]
fn device_id_length_boundaries() {
    let id128 = "a".repeat(128);
    let message = example_with("deviceId", Some(json!(id128)));
    assert_eq!(decode(&message).unwrap().device_id, id128);

    let id129 = "a".repeat(129);
    let message = example_with("deviceId", Some(json!(id129)));
    assert_eq!(
        decode(&message),
        Err(Invalid::DeviceId(DeviceIdError::TooLong { len: 129 }))
    );
    assert_eq!(
        decode(&example_with("deviceId", Some(json!("")))),
        Err(Invalid::DeviceId(DeviceIdError::Empty))
    );
}

#[test]
fn device_id_character_set_is_iot_hubs() {
    let all_specials = "a-:.+%_#*?!(),=@;$'Z9";
    assert_eq!(check_device_id(all_specials), Ok(()));
    for (bad, ch) in [
        ("drone 1", ' '),
        ("drone/1", '/'),
        ("drone\\1", '\\'),
        ("drone\"1", '"'),
        ("drone&1", '&'),
        ("drone~1", '~'),
        ("drone<1", '<'),
        ("drone\u{e9}", '\u{e9}'),
        ("drone\u{0}", '\u{0}'),
    ] {
        assert_eq!(
            check_device_id(bad),
            Err(DeviceIdError::Character { ch, index: 5 }),
            "{bad:?}"
        );
    }
    // Escaped in JSON, still checked after unescaping.
    let message = example_with("deviceId", Some(json!("drone\n1")));
    assert_eq!(
        decode(&message),
        Err(Invalid::DeviceId(DeviceIdError::Character {
            ch: '\n',
            index: 5
        }))
    );
    // A JSON escape of an allowed character is fine.
    let escaped = EXAMPLE.replace("drone-0042", r"drone\u002d0042");
    assert_eq!(decode(escaped.as_bytes()), Ok(example()));
}

#[test]
fn message_size_limit_is_256_kib() {
    // Pad with an unknown field to exactly the limit, then one byte more.
    let base = EXAMPLE.len() + r#","pad":"""#.len();
    let at_limit = EXAMPLE.replace(
        r#""v":1,"#,
        &format!(r#""pad":"{}","v":1,"#, "x".repeat(MAX_MESSAGE_BYTES - base)),
    );
    assert_eq!(at_limit.len(), MAX_MESSAGE_BYTES);
    assert_eq!(decode(at_limit.as_bytes()), Ok(example()));

    let over = at_limit.replacen("xx", "xxx", 1);
    assert_eq!(over.len(), MAX_MESSAGE_BYTES + 1);
    let err = decode(over.as_bytes()).unwrap_err();
    assert_eq!(
        err,
        Invalid::TooLarge {
            size: MAX_MESSAGE_BYTES + 1
        }
    );
    assert_eq!(err.reason(), InvalidReason::TooLarge);
}

#[test]
fn timestamps_must_be_rfc3339() {
    for bad in [
        json!("2026-11-22 09:15"),
        json!("yesterday"),
        json!("2026-11-31T00:00:00Z"),
    ] {
        assert_eq!(
            decode(&example_with("ts", Some(bad.clone()))),
            Err(Invalid::Timestamp(TimeError::Syntax)),
            "{bad}"
        );
    }
    // A number is the wrong JSON type.
    let err = decode(&example_with("ts", Some(json!(1_795_252_502_500_i64)))).unwrap_err();
    assert_eq!(err.reason(), InvalidReason::Json);
}

#[test]
fn offsets_are_accepted_and_normalised() {
    let message = example_with("ts", Some(json!("2026-11-22T10:15:02.500+01:00")));
    assert_eq!(decode(&message), Ok(example()));
}

#[test]
fn battery_above_100_is_rejected() {
    assert_eq!(
        decode(&example_with("batteryPct", Some(json!(100))))
            .unwrap()
            .battery_pct,
        Some(100)
    );
    for bad in [101_u64, 255, 256, 100_000] {
        assert_eq!(
            decode(&example_with("batteryPct", Some(json!(bad)))),
            Err(Invalid::Battery { value: bad })
        );
    }
}

#[test]
fn wrong_types_and_garbage_are_json_errors() {
    for bad in [
        &b""[..],
        b"null",
        b"[]",
        b"{",
        b"\xff\xfe",
        br#"{"v":1,"deviceId":"d","seq":-1,"ts":"2026-11-22T09:15:02Z","lat":0,"lon":0}"#,
        br#"{"v":1,"deviceId":"d","seq":1,"ts":"2026-11-22T09:15:02Z","lat":"0","lon":0}"#,
        br#"{"v":1,"deviceId":"d","seq":1,"ts":"2026-11-22T09:15:02Z","lat":1e400,"lon":0}"#,
        br#"{"v":"1","deviceId":"d","seq":1,"ts":"2026-11-22T09:15:02Z","lat":0,"lon":0}"#,
        br#"{"v":1,"v":1,"deviceId":"d","seq":1,"ts":"2026-11-22T09:15:02Z","lat":0,"lon":0}"#,
    ] {
        let err = decode(bad).unwrap_err();
        assert!(matches!(err, Invalid::Json { .. }), "{err:?}");
        assert_eq!(err.reason(), InvalidReason::Json);
    }
}

#[test]
fn encode_validates_values_json_cannot_carry() {
    for (field, set) in [
        (
            "lat",
            (|p: &mut Position| p.lat = f64::NAN) as fn(&mut Position),
        ),
        ("lon", |p| p.lon = f64::INFINITY),
        ("altM", |p| p.alt_m = Some(f64::NAN)),
        ("headingDeg", |p| p.heading_deg = Some(f64::NEG_INFINITY)),
        ("speedMps", |p| p.speed_mps = Some(f64::NAN)),
    ] {
        let mut position = example();
        set(&mut position);
        assert_eq!(position.encode(), Err(Invalid::NotFinite { field }));
        assert_eq!(position.validate(), Err(Invalid::NotFinite { field }));
    }
    let mut position = example();
    position.battery_pct = Some(101);
    assert_eq!(position.encode(), Err(Invalid::Battery { value: 101 }));
    let mut position = example();
    position.ts = DateTime::from_timestamp(300_000_000_000, 0).unwrap();
    assert_eq!(
        position.encode(),
        Err(Invalid::Timestamp(TimeError::YearOutOfRange))
    );
}

#[test]
fn encode_writes_milliseconds_and_drops_finer_digits() {
    let mut position = example();
    position.ts = utc("2026-11-22T09:15:02.500999Z");
    let text = String::from_utf8(position.encode().unwrap()).unwrap();
    assert!(
        text.contains(r#""ts":"2026-11-22T09:15:02.500Z""#),
        "{text}"
    );
    assert_eq!(decode(text.as_bytes()), Ok(example()));
}

#[test]
fn order_is_device_time_millis_then_seq() {
    assert_eq!(
        example().order(),
        PositionOrder {
            device_time_ms: utc("2026-11-22T09:15:02.500Z").timestamp_millis(),
            seq: 1834
        }
    );
}

#[test]
fn reasons_are_stable_and_listed() {
    let samples = [
        Invalid::TooLarge { size: 1 },
        Invalid::Json {
            detail: String::new(),
        },
        Invalid::MissingField { field: "lat" },
        Invalid::UnsupportedVersion { found: 2 },
        Invalid::Latitude { value: 91.0 },
        Invalid::Longitude { value: 181.0 },
        Invalid::NotFinite { field: "lat" },
        Invalid::Battery { value: 101 },
        Invalid::Satellites {
            field: "sats",
            value: 256,
        },
        Invalid::Accuracy { value: -1.0 },
        Invalid::Timestamp(TimeError::Syntax),
        Invalid::DeviceId(DeviceIdError::Empty),
    ];
    let reasons: Vec<_> = samples.iter().map(Invalid::reason).collect();
    assert_eq!(reasons, InvalidReason::ALL);
    let labels: Vec<_> = reasons.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        labels,
        [
            "too_large",
            "json",
            "missing_field",
            "version",
            "latitude",
            "longitude",
            "not_finite",
            "battery",
            "satellites",
            "accuracy",
            "timestamp",
            "device_id"
        ]
    );
}

#[test]
fn extreme_floats_survive_the_round_trip() {
    // Found by the round-trip property: these need exact float parsing.
    let mut position = example();
    position.speed_mps = Some(-2.062659565705295e-267);
    position.heading_deg = Some(-1.1948519711246778e42);
    position.alt_m = Some(-7.470200622858344e161);
    assert_eq!(decode(&position.encode().unwrap()), Ok(position));
}

//! Property tests: codec round trips, one reason per invalid field, no panics on any input.

use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};
use telemetry::document::{DocumentLayout, PartitionKeyPath, history_id};
use telemetry::order::PositionOrder;
use telemetry::time::{MillisTime, parse_rfc3339};
use telemetry::wire::{FixType, Gnss, Invalid, Position, decode};

/// First and last millisecond of the years 0000 to 9999.
const MIN_MS: i64 = -62_167_219_200_000;
const MAX_MS: i64 = 253_402_300_799_999;

fn finite() -> impl Strategy<Value = f64> {
    use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO
}

fn non_finite() -> impl Strategy<Value = f64> {
    select(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY])
}

fn device_id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9\\-:.+%_#*?!(),=@;$']{1,128}"
}

fn millis_time() -> impl Strategy<Value = DateTime<Utc>> {
    (MIN_MS..=MAX_MS).prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap())
}

prop_compose! {
    fn position()(
        device_id in device_id(),
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

/// One way to break one field of a valid position, and the reason it must produce.
#[derive(Debug, Clone)]
enum Breakage {
    Latitude(f64),
    Longitude(f64),
    NotFinite(&'static str, f64),
    Battery(u8),
    Accuracy(f64),
    DeviceId(String),
    Year(i64),
}

fn breakage() -> impl Strategy<Value = Breakage> {
    let out_of = |limit: f64| {
        prop_oneof![
            (limit..f64::MAX).prop_filter("beyond", move |v| *v > limit),
            (f64::MIN..-limit).prop_filter("beyond", move |v| *v < -limit),
        ]
    };
    prop_oneof![
        out_of(90.0).prop_map(Breakage::Latitude),
        out_of(180.0).prop_map(Breakage::Longitude),
        (
            select(vec![
                "lat",
                "lon",
                "altM",
                "headingDeg",
                "speedMps",
                "hAccM"
            ]),
            non_finite()
        )
            .prop_map(|(field, value)| Breakage::NotFinite(field, value)),
        (101u8..=255).prop_map(Breakage::Battery),
        (f64::MIN..0.0)
            .prop_filter("negative", |v| *v < 0.0)
            .prop_map(Breakage::Accuracy),
        prop_oneof![
            Just(String::new()),
            "[a-z0-9]{129,300}",
            "[a-z]{0,20}[ /\\\\\"&~<>\u{80}-\u{10ffff}][a-z]{0,20}",
        ]
        .prop_map(Breakage::DeviceId),
        prop_oneof![
            (DateTime::<Utc>::MIN_UTC.timestamp()..MIN_MS / 1000),
            (MAX_MS / 1000 + 1..=DateTime::<Utc>::MAX_UTC.timestamp())
        ]
        .prop_map(Breakage::Year),
    ]
}

impl Breakage {
    fn apply(&self, p: &mut Position) {
        match self {
            Breakage::Latitude(v) => p.lat = *v,
            Breakage::Longitude(v) => p.lon = *v,
            Breakage::NotFinite(field, v) => match *field {
                "lat" => p.lat = *v,
                "lon" => p.lon = *v,
                "altM" => p.alt_m = Some(*v),
                "headingDeg" => p.heading_deg = Some(*v),
                "hAccM" => p.gnss.h_acc_m = Some(*v),
                _ => p.speed_mps = Some(*v),
            },
            Breakage::Battery(v) => p.battery_pct = Some(*v),
            Breakage::Accuracy(v) => p.gnss.h_acc_m = Some(*v),
            Breakage::DeviceId(id) => p.device_id = id.clone(),
            Breakage::Year(secs) => p.ts = DateTime::from_timestamp(*secs, 0).unwrap(),
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            Breakage::Latitude(_) => "latitude",
            Breakage::Longitude(_) => "longitude",
            Breakage::NotFinite(..) => "not_finite",
            Breakage::Battery(_) => "battery",
            Breakage::Accuracy(_) => "accuracy",
            Breakage::DeviceId(_) => "device_id",
            Breakage::Year(_) => "timestamp",
        }
    }

    /// The field as it would appear in JSON, for breakages JSON can carry.
    fn as_json(&self) -> Option<(&'static str, Value)> {
        match self {
            Breakage::Latitude(v) => Some(("lat", json!(v))),
            Breakage::Longitude(v) => Some(("lon", json!(v))),
            Breakage::Battery(v) => Some(("batteryPct", json!(v))),
            Breakage::Accuracy(v) => Some(("hAccM", json!(v))),
            Breakage::DeviceId(id) => Some(("deviceId", json!(id))),
            Breakage::NotFinite(..) | Breakage::Year(_) => None,
        }
    }
}

/// A JSON leaf or small structure of any type.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        finite().prop_map(|n| json!(n)),
        ".{0,40}".prop_map(Value::String),
        millis_time().prop_map(|t| json!(MillisTime(t).to_string())),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const FIELDS: [&str; 15] = [
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
    "extra",
];

/// Whatever decode returns, an accepted message must be valid and round-trip.
fn check_decoded(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(position) = decode(bytes) {
        prop_assert_eq!(position.validate(), Ok(()));
        let again = decode(&position.encode().unwrap()).unwrap();
        prop_assert_eq!(again, position);
    }
    Ok(())
}

proptest! {
    #[test]
    fn encode_then_decode_gives_the_same_position(p in position()) {
        let bytes = p.encode().unwrap();
        prop_assert_eq!(decode(&bytes), Ok(p));
    }

    #[test]
    fn each_invalid_field_is_rejected_with_its_reason(p in position(), broken in breakage()) {
        let mut bad = p.clone();
        broken.apply(&mut bad);
        let err = bad.validate().unwrap_err();
        prop_assert_eq!(err.reason().as_str(), broken.reason(), "{:?}", err);
        prop_assert_eq!(bad.encode().unwrap_err(), err);

        if let Some((field, value)) = broken.as_json() {
            let mut message: Value = serde_json::from_slice(&p.encode().unwrap()).unwrap();
            message[field] = value;
            let err = decode(&serde_json::to_vec(&message).unwrap()).unwrap_err();
            prop_assert_eq!(err.reason().as_str(), broken.reason(), "{:?}", err);
        }
    }

    #[test]
    fn each_missing_required_field_is_named(
        p in position(),
        field in select(vec!["v", "deviceId", "seq", "ts", "lat", "lon"]),
    ) {
        let mut message: Value = serde_json::from_slice(&p.encode().unwrap()).unwrap();
        message.as_object_mut().unwrap().remove(field);
        prop_assert_eq!(
            decode(&serde_json::to_vec(&message).unwrap()),
            Err(Invalid::MissingField { field })
        );
    }

    #[test]
    fn other_versions_are_rejected(p in position(), v in any::<u64>().prop_filter("not 1", |v| *v != 1)) {
        let mut message: Value = serde_json::from_slice(&p.encode().unwrap()).unwrap();
        message["v"] = json!(v);
        prop_assert_eq!(
            decode(&serde_json::to_vec(&message).unwrap()),
            Err(Invalid::UnsupportedVersion { found: v })
        );
    }

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_decoded(&bytes)?;
    }

    #[test]
    fn decode_never_panics_on_byte_mutations(
        p in position(),
        edits in proptest::collection::vec(
            (any::<prop::sample::Index>(), 0u8..3, select(b"{}[]\":,.-+eE0123456789tnfaslu\\ \x00\xff".to_vec())),
            1..8,
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
        check_decoded(&bytes)?;
    }

    #[test]
    fn decode_never_panics_on_field_mutations(
        p in position(),
        changes in proptest::collection::vec((select(FIELDS.to_vec()), proptest::option::of(json_value())), 1..4),
    ) {
        let mut message: Value = serde_json::from_slice(&p.encode().unwrap()).unwrap();
        let object = message.as_object_mut().unwrap();
        for (field, value) in changes {
            match value {
                Some(value) => object.insert(field.to_owned(), value),
                None => object.remove(field),
            };
        }
        check_decoded(&serde_json::to_vec(&message).unwrap())?;
    }

    #[test]
    fn times_round_trip_through_text(t in millis_time(), offset_min in -1439i32..=1439) {
        prop_assert_eq!(parse_rfc3339(&MillisTime(t).to_string()), Ok(t));
        let offset = FixedOffset::east_opt(offset_min * 60).unwrap();
        let local = t.with_timezone(&offset).to_rfc3339_opts(SecondsFormat::Millis, true);
        // Near the ends of the year range an offset can move the local year outside it.
        if local.as_bytes()[4] == b'-' {
            prop_assert_eq!(parse_rfc3339(&local), Ok(t));
        }
    }

    #[test]
    fn documents_carry_the_position(p in position(), enqueued in proptest::option::of(millis_time())) {
        let layout = DocumentLayout::default();
        let mut bytes = Vec::new();
        layout.write_latest(&p, enqueued, &mut bytes);
        let document: Value = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(&document, &layout.latest(&p, enqueued));
        prop_assert_eq!(&document["location"]["coordinates"], &json!([p.lon, p.lat]));
        prop_assert_eq!(&document["deviceId"], &json!(p.device_id));
        prop_assert_eq!(&document["deviceTimeMs"], &json!(p.ts.timestamp_millis()));
        prop_assert_eq!(
            parse_rfc3339(document["deviceTime"].as_str().unwrap()),
            Ok(p.ts)
        );

        let nested = DocumentLayout::new("/pk/id".parse().unwrap());
        let history = nested.history(&p, enqueued, Some(60));
        prop_assert_eq!(&history["id"], &json!(history_id(&p.device_id, p.seq)));
        prop_assert_eq!(&history["pk"]["id"], &json!(p.device_id));
        prop_assert_eq!(&history["location"], &document["location"]);
    }

    #[test]
    fn order_is_lexicographic_on_time_then_seq(
        a in (any::<i64>(), any::<u64>()),
        b in (any::<i64>(), any::<u64>()),
    ) {
        let key = |(device_time_ms, seq)| PositionOrder { device_time_ms, seq };
        let (ka, kb) = (key(a), key(b));
        prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        prop_assert!(!(ka.is_newer_than(kb) && kb.is_newer_than(ka)));
        prop_assert_eq!(ka.is_newer_than(kb) || kb.is_newer_than(ka), a != b);
        prop_assert_eq!(ka.is_newer_than(kb), a > b);
    }

    #[test]
    fn partition_key_paths_round_trip(segments in proptest::collection::vec("[a-zA-Z][a-zA-Z0-9_]{0,10}|\"[a-z /-]{1,10}\"", 1..4)) {
        let text = format!("/pk/{}", segments.join("/"));
        let parsed: PartitionKeyPath = text.parse().unwrap();
        prop_assert_eq!(parsed.to_string(), text.clone());
        prop_assert_eq!(parsed.segments().len(), segments.len() + 1);
        let reparsed: PartitionKeyPath = parsed.to_string().parse().unwrap();
        prop_assert_eq!(reparsed, parsed);
    }

    #[test]
    fn partition_key_path_parsing_never_panics(text in ".{0,40}") {
        let _ = text.parse::<PartitionKeyPath>();
    }
}

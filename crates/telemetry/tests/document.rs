//! Cosmos document layout: fields, GeoJSON order, partition key paths, history ids.

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};
use telemetry::document::{
    DOCUMENT_FIELDS, DOCUMENT_SCHEMA_VERSION, DocumentLayout, PATCHED_FIELDS, PartitionKeyPath,
    PartitionKeyPathError, document_id, history_id,
};
use telemetry::wire::{FixType, Gnss, Position, decode};

const EXAMPLE: &str = r#"{"v":1,"deviceId":"drone-0042","seq":1834,"ts":"2026-11-22T09:15:02.500Z","lat":47.6205,"lon":-122.3493,"altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81}"#;

fn example() -> Position {
    decode(EXAMPLE.as_bytes()).unwrap()
}

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

fn path(text: &str) -> PartitionKeyPath {
    text.parse().unwrap()
}

#[test]
fn latest_document_of_the_example() {
    let layout = DocumentLayout::default();
    let enqueued = utc("2026-11-22T09:15:03.1Z");
    let document = layout.latest(&example(), Some(enqueued));
    assert_eq!(
        document,
        json!({
            "id": "drone-0042",
            "deviceId": "drone-0042",
            "kind": "latest",
            "schemaVersion": DOCUMENT_SCHEMA_VERSION,
            "seq": 1834,
            "deviceTime": "2026-11-22T09:15:02.500Z",
            "deviceTimeMs": 1_795_338_902_500_i64,
            "enqueuedTimeMs": 1_795_338_903_100_i64,
            "location": {"type": "Point", "coordinates": [-122.3493, 47.6205]},
            "altM": 121.5,
            "headingDeg": 270.0,
            "speedMps": 12.3,
            "batteryPct": 81
        })
    );
    assert_eq!(
        document["deviceTimeMs"],
        json!(utc("2026-11-22T09:15:02.500Z").timestamp_millis())
    );
}

#[test]
fn geojson_point_is_longitude_first_exactly() {
    let mut bytes = Vec::new();
    DocumentLayout::default().write_latest(&example(), None, &mut bytes);
    let text = String::from_utf8(bytes).unwrap();
    assert!(
        text.contains(r#""location":{"type":"Point","coordinates":[-122.3493,47.6205]}"#),
        "{text}"
    );
}

#[test]
fn written_bytes_equal_the_value_form() {
    let layout = DocumentLayout::new(path("/fleet/deviceId"));
    let enqueued = Some(utc("2026-11-22T09:15:03Z"));
    let mut latest = b"prefix".to_vec();
    layout.write_latest(&example(), enqueued, &mut latest);
    assert_eq!(&latest[..6], b"prefix", "write_latest appends");
    let parsed: Value = serde_json::from_slice(&latest[6..]).unwrap();
    assert_eq!(parsed, layout.latest(&example(), enqueued));

    let mut history = Vec::new();
    layout.write_history(&example(), enqueued, Some(86_400), &mut history);
    let parsed: Value = serde_json::from_slice(&history).unwrap();
    assert_eq!(parsed, layout.history(&example(), enqueued, Some(86_400)));
}

#[test]
fn optional_fields_and_enqueued_time_are_left_out_when_unknown() {
    let mut position = example();
    position.alt_m = None;
    position.heading_deg = None;
    position.speed_mps = None;
    position.battery_pct = None;
    let document = DocumentLayout::default().latest(&position, None);
    let keys: Vec<_> = document.as_object().unwrap().keys().cloned().collect();
    for absent in [
        "altM",
        "headingDeg",
        "speedMps",
        "batteryPct",
        "enqueuedTimeMs",
        "gnss",
        "ttl",
    ] {
        assert!(!keys.iter().any(|k| k == absent), "{absent} in {keys:?}");
    }
}

#[test]
fn history_document_has_seq_in_id_and_optional_ttl() {
    let layout = DocumentLayout::default();
    let document = layout.history(&example(), None, Some(3600));
    assert_eq!(document["id"], json!("drone-0042:1834"));
    assert_eq!(document["kind"], json!("history"));
    assert_eq!(document["ttl"], json!(3600));
    assert_eq!(document["deviceId"], json!("drone-0042"));
    let without_ttl = layout.history(&example(), None, None);
    assert!(without_ttl.get("ttl").is_none());
    assert_eq!(history_id("drone-0042", 1834), "drone-0042:1834");
}

#[test]
fn nested_partition_key_path_creates_objects() {
    let layout = DocumentLayout::new(path("/fleet/region/deviceId"));
    let document = layout.latest(&example(), None);
    assert_eq!(
        document["fleet"],
        json!({"region": {"deviceId": "drone-0042"}})
    );
    assert_eq!(document["deviceId"], json!("drone-0042"));
    let history = layout.history(&example(), None, None);
    assert_eq!(history["fleet"]["region"]["deviceId"], json!("drone-0042"));
}

#[test]
fn quoted_segments_may_contain_slashes() {
    let pk = path(r#"/"a/b"/c"#);
    assert_eq!(pk.segments(), ["a/b", "c"]);
    assert_eq!(pk.to_string(), r#"/"a/b"/c"#);
    let document = DocumentLayout::new(pk).latest(&example(), None);
    assert_eq!(document["a/b"]["c"], json!("drone-0042"));
    assert_eq!(path(r#"/"fleet"/deviceId"#), path("/fleet/deviceId"));
}

#[test]
fn default_layout_writes_device_id_once() {
    let layout = DocumentLayout::default();
    assert_eq!(layout.partition_key_path().to_string(), "/deviceId");
    let mut bytes = Vec::new();
    layout.write_latest(&example(), None, &mut bytes);
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.matches("\"deviceId\"").count(), 1, "{text}");
}

#[test]
fn carries_only_paths_holding_the_device_id() {
    let default = DocumentLayout::default();
    assert!(default.carries(&path("/deviceId")));
    assert!(!default.carries(&path("/fleet/deviceId")));
    assert!(!default.carries(&path("/tenant")));

    let nested = DocumentLayout::new(path("/fleet/deviceId"));
    assert!(nested.carries(&path("/fleet/deviceId")));
    assert!(nested.carries(&path(r#"/"fleet"/"deviceId""#)));
    assert!(nested.carries(&path("/deviceId")));
    assert!(!nested.carries(&path("/fleet")));
    assert!(!nested.carries(&path("/fleet/deviceId/x")));
}

/// The variant of a path error, for table-driven tests.
fn kind(err: &PartitionKeyPathError) -> &'static str {
    match err {
        PartitionKeyPathError::NoLeadingSlash { .. } => "no_leading_slash",
        PartitionKeyPathError::EmptySegment { .. } => "empty_segment",
        PartitionKeyPathError::Quote { .. } => "quote",
        PartitionKeyPathError::Character { .. } => "character",
        PartitionKeyPathError::Reserved { .. } => "reserved",
    }
}

#[test]
fn malformed_paths_are_rejected_with_reasons() {
    for (text, expected) in [
        ("deviceId", "no_leading_slash"),
        ("", "no_leading_slash"),
        ("/", "empty_segment"),
        ("/a//b", "empty_segment"),
        ("/a/", "empty_segment"),
        ("/\"\"", "empty_segment"),
        ("/\"a", "quote"),
        ("/\"a\"b", "quote"),
        ("/a/*", "character"),
        ("/a/?", "character"),
        ("/a[0]", "character"),
    ] {
        let err = text.parse::<PartitionKeyPath>().unwrap_err();
        assert_eq!(kind(&err), expected, "{text:?}: {err:?}");
        assert!(err.to_string().contains(text), "{err}");
    }
}

#[test]
fn paths_clashing_with_document_fields_are_rejected() {
    for text in [
        "/id",
        "/seq",
        "/location/type",
        "/deviceId/x",
        "/_ts",
        "/ttl",
    ] {
        let err = text.parse::<PartitionKeyPath>().unwrap_err();
        assert_eq!(kind(&err), "reserved", "{text}: {err:?}");
    }
}

#[test]
fn document_fields_list_covers_every_written_field() {
    let layout = DocumentLayout::default();
    let mut position = example();
    position.gnss.fix = Some(FixType::Fix3d);
    let document = layout.history(&position, Some(utc("2026-11-22T09:15:03Z")), Some(60));
    let mut latest = layout.latest(&position, Some(utc("2026-11-22T09:15:03Z")));
    latest
        .as_object_mut()
        .unwrap()
        .extend(document.as_object().unwrap().clone());
    let written: Vec<_> = latest.as_object().unwrap().keys().cloned().collect();
    let mut listed: Vec<_> = DOCUMENT_FIELDS.iter().map(|f| f.to_string()).collect();
    let mut written_sorted = written.clone();
    written_sorted.sort();
    listed.sort();
    assert_eq!(written_sorted, listed);
}

#[test]
fn document_ids_escape_what_cosmos_forbids() {
    assert_eq!(document_id("drone-0042"), "drone-0042");
    assert_eq!(document_id("a#b?c%d"), "a%23b%3Fc%25d");
    // Distinct device ids keep distinct document ids.
    assert_ne!(document_id("a#"), document_id("a%23"));
    let mut position = example();
    position.device_id = "bay#3?".into();
    let layout = DocumentLayout::default();
    let latest = layout.latest(&position, None);
    assert_eq!(latest["id"], json!("bay%233%3F"));
    assert_eq!(latest["deviceId"], json!("bay#3?"));
    let history = layout.history(&position, None, None);
    assert_eq!(history["id"], json!("bay%233%3F:1834"));
}

#[test]
fn written_bytes_of_the_example_are_exact() {
    let layout = DocumentLayout::new(path("/fleet/deviceId"));
    let mut bytes = Vec::new();
    let mut position = example();
    position.gnss = Gnss {
        fix: Some(FixType::Fix3d),
        sats: Some(12),
        sats_visible: Some(14),
        h_acc_m: Some(1.5),
    };
    layout.write_history(
        &position,
        Some(utc("2026-11-22T09:15:03.1Z")),
        Some(60),
        &mut bytes,
    );
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        concat!(
            r#"{"id":"drone-0042:1834","deviceId":"drone-0042","fleet":{"deviceId":"drone-0042"},"#,
            r#""kind":"history","schemaVersion":1,"seq":1834,"#,
            r#""deviceTime":"2026-11-22T09:15:02.500Z","deviceTimeMs":1795338902500,"#,
            r#""enqueuedTimeMs":1795338903100,"#,
            r#""location":{"type":"Point","coordinates":[-122.3493,47.6205]},"#,
            r#""altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81,"#,
            r#""gnss":{"fix":"3d","sats":12,"satsVisible":14,"hAccM":1.5},"ttl":60}"#
        )
    );
}

#[test]
fn path_segments_needing_escapes_are_written_escaped() {
    let layout = DocumentLayout::new(path(r#"/"a\b"/c"#));
    let mut bytes = Vec::new();
    layout.write_latest(&example(), None, &mut bytes);
    let document: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(document["a\\b"]["c"], json!("drone-0042"));
}

/// The patch as (path, value) pairs, checking its shape on the way.
fn patch_sets(patch: &[u8]) -> (Vec<(String, Value)>, String) {
    let patch: Value = serde_json::from_slice(patch).expect("the patch is JSON");
    let sets = patch["operations"]
        .as_array()
        .expect("operations")
        .iter()
        .map(|op| {
            assert_eq!(op["op"], "set", "{op}");
            let value = op.get("value").expect("every set has a value").clone();
            (op["path"].as_str().unwrap().to_owned(), value)
        })
        .collect();
    (sets, patch["condition"].as_str().unwrap().to_owned())
}

#[test]
fn patch_of_the_example_sets_each_changing_field_to_the_document_value() {
    let layout = DocumentLayout::default();
    let enqueued = utc("2026-11-22T09:15:03.1Z");
    let mut bytes = b"prefix".to_vec();
    layout.write_patch(&example(), Some(enqueued), &mut bytes);
    assert_eq!(&bytes[..6], b"prefix", "write_patch appends");
    let (sets, condition) = patch_sets(&bytes[6..]);
    let document = layout.latest(&example(), Some(enqueued));
    let paths: Vec<&str> = sets.iter().map(|(p, _)| p.as_str()).collect();
    let expected: Vec<String> = PATCHED_FIELDS.iter().map(|f| format!("/{f}")).collect();
    assert_eq!(paths, expected);
    for (path, value) in &sets {
        assert_eq!(value, &document[&path[1..]], "{path}");
    }
    assert_eq!(
        condition,
        example().order().stored_is_older_condition(),
        "the patch applies only over an older stored position"
    );
}

#[test]
fn patch_sets_fields_the_position_lacks_to_null() {
    let position = decode(
        br#"{"v":1,"deviceId":"d1","seq":2,"ts":"2026-11-22T09:15:02.500Z","lat":1.0,"lon":2.0,"speedMps":3.5}"#,
    )
    .unwrap();
    let mut bytes = Vec::new();
    DocumentLayout::default().write_patch(&position, None, &mut bytes);
    let (sets, _) = patch_sets(&bytes);
    let value_of = |path: &str| sets.iter().find(|(p, _)| p == path).unwrap().1.clone();
    for absent in [
        "/enqueuedTimeMs",
        "/gnss",
        "/altM",
        "/headingDeg",
        "/batteryPct",
    ] {
        assert_eq!(value_of(absent), Value::Null, "{absent}");
    }
    assert_eq!(value_of("/speedMps"), json!(3.5));
}

#[test]
fn patched_fields_are_the_document_fields_that_change() {
    let fixed = ["id", "deviceId", "kind", "schemaVersion", "ttl"];
    for field in DOCUMENT_FIELDS {
        assert_ne!(
            fixed.contains(&field),
            PATCHED_FIELDS.contains(&field),
            "{field} is either fixed or patched"
        );
    }
}

prop_compose! {
    fn position()(
        seq in any::<u64>(),
        ms in 1_600_000_000_000i64..2_000_000_000_000,
        lat in -90.0f64..=90.0,
        lon in -180.0f64..=180.0,
        alt in proptest::option::of(-1e4f64..1e5),
        heading in proptest::option::of(0.0f64..360.0),
        speed in proptest::option::of(0.0f64..100.0),
        battery in proptest::option::of(0u8..=100),
        fix in proptest::option::of(proptest::sample::select(FixType::ALL.to_vec())),
        sats in proptest::option::of(any::<u8>()),
        h_acc_m in proptest::option::of(0.0f64..1e3),
    ) -> Position {
        Position {
            device_id: "drone-1".into(),
            seq,
            ts: DateTime::from_timestamp_millis(ms).unwrap(),
            lat,
            lon,
            alt_m: alt,
            heading_deg: heading,
            speed_mps: speed,
            battery_pct: battery,
            gnss: Gnss {
                fix,
                sats,
                sats_visible: sats.map(|s| s.saturating_add(2)),
                h_acc_m,
            },
        }
    }
}

fn some_time() -> impl Strategy<Value = Option<DateTime<Utc>>> {
    proptest::option::of(
        (1_600_000_000_000i64..2_000_000_000_000)
            .prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap()),
    )
}

proptest! {
    /// A patch applied over any stored latest document of the drone leaves exactly the
    /// new position's document (absent fields as null), whatever fields the old one had.
    #[test]
    fn patch_over_any_older_document_gives_the_new_document(
        old in position(),
        old_enqueued in some_time(),
        new in position(),
        new_enqueued in some_time(),
        pk in prop_oneof![Just("/deviceId"), Just("/fleet/deviceId")],
    ) {
        let layout = DocumentLayout::new(path(pk));
        let mut stored = layout.latest(&old, old_enqueued);
        let mut bytes = Vec::new();
        layout.write_patch(&new, new_enqueued, &mut bytes);
        let (sets, _) = patch_sets(&bytes);
        prop_assert_eq!(sets.len(), PATCHED_FIELDS.len());
        let object = stored.as_object_mut().unwrap();
        for (path, value) in sets {
            object.insert(path[1..].to_owned(), value);
        }
        object.retain(|_, v| !v.is_null());
        prop_assert_eq!(stored, layout.latest(&new, new_enqueued));
    }
}

/// A segment's id is escaped and it carries the device id at a nested partition key path.
#[test]
fn segments_escape_ids_and_carry_a_nested_key() {
    let layout = DocumentLayout::new("/fleet/deviceId".parse::<PartitionKeyPath>().unwrap());
    let point = telemetry::document::SegmentPoint {
        seq: 1,
        device_time_ms: 1_795_338_902_500,
        lon: 1.0,
        lat: 2.0,
        alt_m: None,
        heading_deg: None,
        speed_mps: None,
        battery_pct: None,
    };
    let mut out = Vec::new();
    layout.write_segment(
        "a#b",
        (1_795_338_900_000, 1_795_339_200_000),
        &[point],
        None,
        &mut out,
    );
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(doc["id"], "a%23b:seg:1795338900000");
    assert_eq!(doc["fleet"], serde_json::json!({"deviceId": "a#b"}));
    assert_eq!(
        doc["points"],
        serde_json::json!([[1, 1795338902500_i64, 1.0, 2.0]])
    );
    assert!(doc.get("ttl").is_none());
}

//! The GNSS health on the wire (`fix`, `sats`, `satsVisible`, `hAccM`) and in the documents
//! (`gnss`): examples, absence, validation, forward compatibility.

use serde_json::{Value, json};
use telemetry::document::DocumentLayout;
use telemetry::wire::{
    BatchBuilder, Decoded, FixType, Gnss, Invalid, InvalidReason, decode, decode_message,
    decode_reference,
};

/// A message carrying every health member: an RTK receiver with 12 of 14 satellites in its
/// solution, 2 cm horizontal accuracy.
const WITH_HEALTH: &str = r#"{"v":1,"deviceId":"drone-0042","seq":1834,"ts":"2026-11-22T09:15:02.500Z","lat":47.6205,"lon":-122.3493,"fix":"rtkFixed","sats":12,"satsVisible":14,"hAccM":0.02}"#;

const WITHOUT_HEALTH: &str = r#"{"v":1,"deviceId":"drone-0042","seq":1834,"ts":"2026-11-22T09:15:02.500Z","lat":47.6205,"lon":-122.3493}"#;

fn with(field: &str, value: Value) -> Vec<u8> {
    let mut message: Value = serde_json::from_str(WITHOUT_HEALTH).unwrap();
    message[field] = value;
    serde_json::to_vec(&message).unwrap()
}

#[test]
fn health_is_read_and_written_back_byte_for_byte() {
    let position = decode(WITH_HEALTH.as_bytes()).unwrap();
    assert_eq!(
        position.gnss,
        Gnss {
            fix: Some(FixType::RtkFixed),
            sats: Some(12),
            sats_visible: Some(14),
            h_acc_m: Some(0.02),
        }
    );
    assert_eq!(
        String::from_utf8(position.encode().unwrap()).unwrap(),
        WITH_HEALTH
    );
}

#[test]
fn a_message_without_health_has_none_and_none_is_written() {
    let position = decode(WITHOUT_HEALTH.as_bytes()).unwrap();
    assert!(position.gnss.is_empty());
    assert_eq!(
        String::from_utf8(position.encode().unwrap()).unwrap(),
        WITHOUT_HEALTH
    );
    for field in ["fix", "sats", "satsVisible", "hAccM"] {
        assert!(decode(&with(field, Value::Null)).unwrap().gnss.is_empty());
    }
}

#[test]
fn every_fix_type_has_its_wire_name() {
    let names: Vec<_> = FixType::ALL.iter().map(|fix| fix.as_str()).collect();
    assert_eq!(names, ["none", "2d", "3d", "dgps", "rtkFloat", "rtkFixed"]);
    for fix in FixType::ALL {
        let message = with("fix", json!(fix.as_str()));
        assert_eq!(decode(&message).unwrap().gnss.fix, Some(fix));
    }
}

#[test]
fn a_fix_name_this_reader_does_not_know_is_absent_and_the_position_stands() {
    for name in ["ppp", "static", "3D", "RTK_FIXED", ""] {
        let position = decode(&with("fix", json!(name))).unwrap();
        assert_eq!(position.gnss.fix, None, "{name}");
    }
    // Not a string at all is a malformed message, as for any field of the wrong type.
    let err = decode(&with("fix", json!(3))).unwrap_err();
    assert_eq!(err.reason(), InvalidReason::Json);
}

#[test]
fn satellite_counts_above_255_are_refused_with_their_field() {
    assert_eq!(
        decode(&with("sats", json!(255))).unwrap().gnss.sats,
        Some(255)
    );
    for field in ["sats", "satsVisible"] {
        let err = decode(&with(field, json!(256))).unwrap_err();
        assert_eq!(err, Invalid::Satellites { field, value: 256 });
        assert_eq!(err.reason().as_str(), "satellites");
        assert_eq!(decode_reference(&with(field, json!(256))), Err(err));
    }
    assert_eq!(
        decode(&with("sats", json!(-1))).unwrap_err().reason(),
        InvalidReason::Json
    );
}

#[test]
fn negative_accuracy_is_refused_and_zero_is_not() {
    let err = decode(&with("hAccM", json!(-0.5))).unwrap_err();
    assert_eq!(err, Invalid::Accuracy { value: -0.5 });
    assert_eq!(err.reason().as_str(), "accuracy");
    assert_eq!(
        decode(&with("hAccM", json!(0.0))).unwrap().gnss.h_acc_m,
        Some(0.0)
    );
    let mut position = decode(WITHOUT_HEALTH.as_bytes()).unwrap();
    position.gnss.h_acc_m = Some(f64::NAN);
    assert_eq!(
        position.encode().unwrap_err(),
        Invalid::NotFinite { field: "hAccM" }
    );
    position.gnss.h_acc_m = Some(-1.0);
    assert_eq!(
        position.validate().unwrap_err().reason(),
        InvalidReason::Accuracy
    );
}

#[test]
fn a_batch_carries_each_position_health() {
    let mut batch = BatchBuilder::new("drone-0042");
    batch.push(WITH_HEALTH.as_bytes());
    batch.push(WITHOUT_HEALTH.as_bytes());
    let Decoded::Batch(batch) = decode_message(&batch.finish()).unwrap() else {
        panic!("a batch")
    };
    let health: Vec<_> = batch
        .positions
        .into_iter()
        .map(|p| p.unwrap().gnss)
        .collect();
    assert_eq!(health[0].fix, Some(FixType::RtkFixed));
    assert!(health[1].is_empty());
}

#[test]
fn documents_carry_the_health_as_one_object_only_when_the_position_has_some() {
    let layout = DocumentLayout::default();
    let position = decode(WITH_HEALTH.as_bytes()).unwrap();
    let expected = json!({"fix": "rtkFixed", "sats": 12, "satsVisible": 14, "hAccM": 0.02});
    assert_eq!(layout.latest(&position, None)["gnss"], expected);
    assert_eq!(layout.history(&position, None, None)["gnss"], expected);

    let mut partial = position.clone();
    partial.gnss = Gnss {
        sats_visible: Some(9),
        ..Gnss::default()
    };
    assert_eq!(
        layout.latest(&partial, None)["gnss"],
        json!({"satsVisible": 9})
    );

    let bare = decode(WITHOUT_HEALTH.as_bytes()).unwrap();
    assert!(layout.latest(&bare, None).get("gnss").is_none());
    assert!(layout.history(&bare, None, None).get("gnss").is_none());
}

#[test]
fn the_document_object_reads_back_as_the_health() {
    let layout = DocumentLayout::default();
    let position = decode(WITH_HEALTH.as_bytes()).unwrap();
    let document = layout.latest(&position, None);
    let read: Gnss = serde_json::from_value(document["gnss"].clone()).unwrap();
    assert_eq!(read, position.gnss);
    let unknown: Gnss = serde_json::from_value(json!({"fix": "ppp", "sats": 7})).unwrap();
    assert_eq!(
        unknown,
        Gnss {
            sats: Some(7),
            ..Gnss::default()
        }
    );
    assert!(serde_json::from_value::<Gnss>(json!({"hAccM": -1.0})).is_err());
}

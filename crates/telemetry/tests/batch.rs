//! The batch message (version 2): read from hand-written JSON, and the builder's output
//! read back by serde_json, not by our own decoder.

use serde_json::Value;
use telemetry::wire::{
    BATCH_MAX_BYTES, BatchBuilder, Decoded, Invalid, Position, decode, decode_message,
};

const ONE: &str = r#"{"v":1,"deviceId":"drone-7","seq":1,"ts":"2026-11-22T09:15:00.000Z","lat":47.6,"lon":-122.3}"#;
const TWO: &str = r#"{"v":1,"deviceId":"drone-7","seq":2,"ts":"2026-11-22T09:15:05.000Z","lat":47.7,"lon":-122.4,"batteryPct":80}"#;

#[test]
fn a_version_1_message_reads_as_one_position() {
    let Ok(Decoded::One(position)) = decode_message(ONE.as_bytes()) else {
        panic!("one position");
    };
    assert_eq!(position.seq, 1);
    assert_eq!(position.lat, 47.6);
}

#[test]
fn a_batch_reads_as_each_of_its_positions_in_order() {
    let message = format!(r#"{{"v":2,"deviceId":"drone-7","positions":[{ONE},{TWO}]}}"#);
    let Ok(Decoded::Batch(batch)) = decode_message(message.as_bytes()) else {
        panic!("a batch");
    };
    assert_eq!(batch.device_id, "drone-7");
    let seqs: Vec<u64> = batch
        .positions
        .iter()
        .map(|p| p.as_ref().unwrap().seq)
        .collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(batch.positions[1].as_ref().unwrap().battery_pct, Some(80));
}

#[test]
fn a_bad_element_is_refused_alone() {
    let bad =
        r#"{"v":1,"deviceId":"drone-7","seq":3,"ts":"2026-11-22T09:15:10Z","lat":95,"lon":0}"#;
    let message = format!(r#"{{"v":2,"deviceId":"drone-7","positions":[{ONE},{bad},{TWO}]}}"#);
    let Ok(Decoded::Batch(batch)) = decode_message(message.as_bytes()) else {
        panic!("a batch");
    };
    assert!(batch.positions[0].is_ok());
    assert_eq!(batch.positions[1], Err(Invalid::Latitude { value: 95.0 }));
    assert!(batch.positions[2].is_ok());
}

#[test]
fn a_batch_without_its_parts_is_invalid() {
    for (message, expected) in [
        (
            r#"{"v":2,"positions":[]}"#,
            Some(Invalid::MissingField { field: "deviceId" }),
        ),
        (
            r#"{"v":2,"deviceId":"drone-7"}"#,
            Some(Invalid::MissingField { field: "positions" }),
        ),
        (r#"{"v":2,"deviceId":"drone-7","positions":[]}"#, None),
        (r#"{"v":2,"deviceId":"drone-7","positions":{}}"#, None),
    ] {
        let err = decode_message(message.as_bytes()).unwrap_err();
        match expected {
            Some(expected) => assert_eq!(err, expected, "{message}"),
            None => assert!(matches!(err, Invalid::Json { .. }), "{message}: {err:?}"),
        }
    }
    assert!(matches!(
        decode_message(br#"{"v":3,"deviceId":"drone-7"}"#),
        Err(Invalid::UnsupportedVersion { found: 3 })
    ));
}

#[test]
fn a_version_1_reader_refuses_a_batch_by_its_version() {
    let message = format!(r#"{{"v":2,"deviceId":"drone-7","positions":[{ONE}]}}"#);
    let err = decode(message.as_bytes()).unwrap_err();
    assert_eq!(err, Invalid::UnsupportedVersion { found: 2 });
    assert!(err.to_string().contains("version 2"), "{err}");
}

fn position(seq: u64) -> Position {
    Position {
        device_id: "drone-0042".into(),
        seq,
        ts: "2026-11-22T09:15:02.500Z".parse().unwrap(),
        lat: 47.620_512_345,
        lon: -122.349_312_345,
        alt_m: Some(121.5),
        heading_deg: Some(270.0),
        speed_mps: Some(12.3),
        battery_pct: Some(81),
        gnss: Default::default(),
    }
}

#[test]
fn the_builder_writes_json_that_serde_reads_and_stays_within_4_kb() {
    let mut builder = BatchBuilder::new("drone-0042");
    let mut seq = 0;
    loop {
        let message = position(seq).encode().unwrap();
        if !builder.fits(&message) {
            break;
        }
        builder.push(&message);
        seq += 1;
    }
    assert!(builder.len() >= 15, "{} positions", builder.len());
    let bytes = builder.finish();
    assert!(bytes.len() <= BATCH_MAX_BYTES && BATCH_MAX_BYTES < 4096);
    let value: Value = serde_json::from_slice(&bytes).expect("valid JSON");
    assert_eq!(value["v"], 2);
    assert_eq!(value["deviceId"], "drone-0042");
    let elements = value["positions"].as_array().unwrap();
    assert_eq!(elements.len() as u64, seq);
    for (i, element) in elements.iter().enumerate() {
        assert_eq!(element["seq"], i as u64);
        assert_eq!(element["v"], 1);
        assert_eq!(element["lat"], 47.620_512_345);
    }
}

//! Fuzzes the wire decoder: it must never panic, must return exactly what the reference
//! decoder returns, and whatever it accepts must be valid, re-encode to a message that
//! decodes to the same position, and make well-formed documents.

#![no_main]

use libfuzzer_sys::fuzz_target;
use telemetry::document::DocumentLayout;
use telemetry::wire::{Position, decode, decode_reference};

fuzz_target!(|data: &[u8]| {
    let decoded = decode(data);
    // Debug output tells apart every two f64s that differ (`-0.0` and `0.0` included).
    assert_eq!(
        format!("{decoded:?}"),
        format!("{:?}", decode_reference(data)),
        "fast and reference decoders differ"
    );
    let Ok(position) = decoded else {
        return;
    };
    check_accepted(&position);
});

fn check_accepted(position: &Position) {
    assert_eq!(position.validate(), Ok(()));
    let encoded = position.encode().expect("a decoded position encodes");
    assert_eq!(decode(&encoded).as_ref(), Ok(position));

    let layout = DocumentLayout::default();
    let mut bytes = Vec::new();
    layout.write_latest(position, None, &mut bytes);
    let document: serde_json::Value =
        serde_json::from_slice(&bytes).expect("documents are valid JSON");
    assert_eq!(document, layout.latest(position, None));
    assert_eq!(
        document["location"]["coordinates"],
        serde_json::json!([position.lon, position.lat])
    );
}

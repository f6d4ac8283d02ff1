//! Fixtures shared by the benches in `benches/`.

/// A latest-position document of `device` (about 330 bytes), as the writer stores it: the
/// `seq`-th position of a drone flying a slow pattern, so that successive documents of a
/// device differ as real overwrites do. Used where a bench writes documents straight to the
/// local endpoint (`cosmos_sim`) or through the bulk writer (`bulk_writer`).
pub fn position_document(device: &str, seq: usize) -> String {
    format!(
        concat!(
            r#"{{"id":"{d}","deviceId":"{d}","seq":{s},"deviceTimeMs":{t},"receivedTimeMs":{r},"#,
            r#""location":{{"type":"Point","coordinates":[{lon:.7},{lat:.7}]}},"#,
            r#""altitudeM":{alt:.3},"headingDeg":{hdg:.2},"speedMps":12.5,"ttl":86400}}"#
        ),
        d = device,
        s = seq,
        t = 1_763_800_000_000u64 + seq as u64 * 5_000,
        r = 1_763_800_000_450u64 + seq as u64 * 5_000,
        lon = -122.12 + (seq % 1000) as f64 * 1e-4,
        lat = 47.66 + (seq % 777) as f64 * 1e-4,
        alt = 120.0 + (seq % 50) as f64 * 0.25,
        hdg = (seq % 360) as f64,
    )
}

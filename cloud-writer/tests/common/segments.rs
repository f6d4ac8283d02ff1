//! Track segments read back with the official `@azure/cosmos` SDK
//! (`tests/sdk/track_segments.mjs`), not with the writer's own decoder: what any client of
//! the container sees.

use cosmos_sim::CosmosSim;

/// A track segment as the official SDK read it.
#[derive(Debug)]
pub struct Segment {
    pub device_id: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub ttl: Option<u64>,
    /// `[seq, deviceTimeMs]` of each point, as stored.
    pub points: Vec<(u64, i64)>,
    /// The document as the SDK received it, system properties included.
    pub bytes: usize,
}

/// Every segment of container `container` of database `telemetry` on `sim`, read with
/// `@azure/cosmos` signing with account key `key`.
pub async fn segments_by_sdk(sim: &CosmosSim, key: &str, container: &str) -> Vec<Segment> {
    let script = format!(
        "{}/tests/sdk/track_segments.mjs",
        env!("CARGO_MANIFEST_DIR")
    );
    let args = ["telemetry", container];
    let read =
        test_harness::run_sdk_script(script.as_ref(), &sim.endpoint(), key, &args, &[]).await;
    read["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Segment {
            device_id: s["deviceId"].as_str().unwrap().to_owned(),
            start_ms: s["startMs"].as_i64().unwrap(),
            end_ms: s["endMs"].as_i64().unwrap(),
            ttl: s["ttl"].as_u64(),
            points: s["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_u64().unwrap(), p[1].as_i64().unwrap()))
                .collect(),
            bytes: s["bytes"].as_u64().unwrap() as usize,
        })
        .collect()
}

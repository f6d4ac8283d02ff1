//! An independent great-circle distance, for tests that check a server's spatial answers.
//!
//! The servers under test (the Cosmos stand-in's `ST_DISTANCE`, and through it the read API)
//! compute with `telemetry::geo::haversine_m`. A test that judged them with that same function
//! would pass whatever the function got wrong, so the tests judge with this one: written
//! apart from it (the atan2 form of the haversine) and with no dependency on it.

/// Great-circle distance in metres between two `(longitude, latitude)` points in degrees, on
/// a sphere of radius 6,371,008.8 m (the mean Earth radius).
pub fn independent_haversine_m(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (p1, p2) = (a.1.to_radians(), b.1.to_radians());
    let (dp, dl) = ((b.1 - a.1).to_radians(), (b.0 - a.0).to_radians());
    let x = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
    2.0 * 6_371_008.8 * x.sqrt().atan2((1.0 - x).sqrt())
}

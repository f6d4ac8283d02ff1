//! Great-circle distance between two positions, in metres on a sphere of the mean Earth
//! radius: the one haversine of the workspace, behind the Cosmos stand-in's `ST_DISTANCE`
//! and the demo's check of the spatial query.
//!
//! It lives here because this crate owns the position's coordinates and depends on no
//! other crate of the workspace, so every user (cosmos-sim, fleet) can depend on it without
//! a cycle. Tests that hold a server's distances to account use the independent form in
//! `test-harness` instead, so that they do not check this function against itself.

/// Mean Earth radius (IUGG), metres.
pub const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// A point as `(longitude, latitude)` in degrees: GeoJSON's order.
pub type LonLat = (f64, f64);

/// Great-circle distance in metres between `a` and `b` (haversine).
pub fn haversine_m(a: LonLat, b: LonLat) -> f64 {
    let (lat1, lat2) = (a.1.to_radians(), b.1.to_radians());
    let dlat = lat2 - lat1;
    let dlon = (b.0 - a.0).to_radians();
    let h = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * h.sqrt().min(1.0).asin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_degree_of_latitude_is_about_111_km() {
        let d = haversine_m((0.0, 0.0), (0.0, 1.0));
        assert!((d - 111_195.08).abs() < 1.0, "{d}");
        assert_eq!(haversine_m((10.0, 20.0), (10.0, 20.0)), 0.0);
    }

    #[test]
    fn longitude_shrinks_with_latitude() {
        let at_equator = haversine_m((0.0, 0.0), (1.0, 0.0));
        let at_60 = haversine_m((0.0, 60.0), (1.0, 60.0));
        assert!(
            (at_60 / at_equator - 0.5).abs() < 1e-3,
            "{at_60} {at_equator}"
        );
    }

    #[test]
    fn symmetric_and_zero_on_itself() {
        let a = (-122.3321, 47.6062);
        let b = (-122.3493, 47.6205);
        assert_eq!(haversine_m(a, a), 0.0);
        assert!((haversine_m(a, b) - haversine_m(b, a)).abs() < 1e-9);
        // Seattle waterfront to the Space Needle: about 2 km.
        assert!(
            (1_900.0..2_100.0).contains(&haversine_m(a, b)),
            "{}",
            haversine_m(a, b)
        );
    }

    #[test]
    fn antipodes_are_half_the_circumference() {
        let d = haversine_m((0.0, 0.0), (180.0, 0.0));
        assert!(
            (d - std::f64::consts::PI * EARTH_RADIUS_M).abs() < 1e-6,
            "{d}"
        );
    }
}

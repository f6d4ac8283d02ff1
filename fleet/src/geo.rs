//! Great-circle distance on the mean Earth sphere: the demo's independent check of the
//! spatial query's answer.

/// Mean Earth radius in metres (IUGG).
pub const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// Great-circle distance in metres between two `(lat, lon)` points in degrees (haversine).
pub fn distance_m(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (lat1, lat2) = (a.0.to_radians(), b.0.to_radians());
    let dlat = lat2 - lat1;
    let dlon = (b.1 - a.1).to_radians();
    let h = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * h.sqrt().asin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_degree_of_latitude_is_about_111_km() {
        let d = distance_m((0.0, 0.0), (1.0, 0.0));
        assert!((d - 111_195.0).abs() < 5.0, "{d}");
    }

    #[test]
    fn longitude_shrinks_with_latitude() {
        let at_equator = distance_m((0.0, 0.0), (0.0, 1.0));
        let at_60 = distance_m((60.0, 0.0), (60.0, 1.0));
        assert!(
            (at_60 / at_equator - 0.5).abs() < 1e-3,
            "{at_60} {at_equator}"
        );
    }

    #[test]
    fn symmetric_and_zero_on_itself() {
        let a = (47.6062, -122.3321);
        let b = (47.6205, -122.3493);
        assert_eq!(distance_m(a, a), 0.0);
        assert!((distance_m(a, b) - distance_m(b, a)).abs() < 1e-9);
        // Seattle waterfront to the Space Needle: about 2 km.
        assert!(
            (1_900.0..2_100.0).contains(&distance_m(a, b)),
            "{}",
            distance_m(a, b)
        );
    }
}

//! The fleet's area and where its drones are: the centre the demo and the load generator
//! fly around, and great-circle distance on the WGS-84 mean sphere.

use std::f64::consts::TAU;

/// Mean Earth radius in metres (IUGG), the sphere distances are measured on.
pub const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// A circular area drones fly in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetArea {
    /// Latitude of the centre, degrees.
    pub lat: f64,
    /// Longitude of the centre, degrees.
    pub lon: f64,
    /// Radius in metres.
    pub radius_m: f64,
}

impl Default for FleetArea {
    /// A 5 km circle around Seattle's Space Needle.
    fn default() -> Self {
        FleetArea {
            lat: 47.6205,
            lon: -122.3493,
            radius_m: 5_000.0,
        }
    }
}

impl FleetArea {
    /// The point `north_m` metres north and `east_m` metres east of the centre (local
    /// flat approximation, good to well under a metre over a few kilometres).
    pub fn offset(&self, north_m: f64, east_m: f64) -> (f64, f64) {
        let lat = self.lat + (north_m / EARTH_RADIUS_M).to_degrees();
        let lon = self.lon + (east_m / (EARTH_RADIUS_M * self.lat.to_radians().cos())).to_degrees();
        (lat, lon)
    }

    /// Where load-generator drone `index` of `count` is after `flight_secs` seconds: each
    /// drone circles its own home point (spread over the area on a sunflower spiral) at
    /// 12 m/s on a 200 m radius. Returns `(lat, lon, heading_deg)`.
    pub fn orbit(&self, index: usize, count: usize, flight_secs: f64) -> (f64, f64, f64) {
        const ORBIT_RADIUS_M: f64 = 200.0;
        const SPEED_MPS: f64 = 12.0;
        let golden = TAU * (1.0 - 1.0 / ((1.0 + 5f64.sqrt()) / 2.0));
        let r = (self.radius_m - ORBIT_RADIUS_M).max(0.0)
            * ((index as f64 + 0.5) / count.max(1) as f64).sqrt();
        let theta = golden * index as f64;
        let (home_n, home_e) = (r * theta.cos(), r * theta.sin());
        let angle = theta + flight_secs * SPEED_MPS / ORBIT_RADIUS_M;
        let (lat, lon) = self.offset(
            home_n + ORBIT_RADIUS_M * angle.cos(),
            home_e + ORBIT_RADIUS_M * angle.sin(),
        );
        // Counter-clockwise seen from above: heading is the tangent direction.
        let heading = (angle + TAU / 4.0).sin().atan2((angle + TAU / 4.0).cos());
        (lat, lon, heading.to_degrees().rem_euclid(360.0))
    }
}

/// Great-circle distance in metres between two `(lat, lon)` points (haversine).
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
    fn offsets_are_the_distance_they_claim() {
        let area = FleetArea::default();
        let north = area.offset(1_000.0, 0.0);
        let east = area.offset(0.0, 1_000.0);
        assert!((distance_m((area.lat, area.lon), north) - 1_000.0).abs() < 0.5);
        assert!((distance_m((area.lat, area.lon), east) - 1_000.0).abs() < 0.5);
    }

    #[test]
    fn one_degree_of_latitude_is_about_111_km() {
        let d = distance_m((0.0, 0.0), (1.0, 0.0));
        assert!((d - 111_195.0).abs() < 5.0, "{d}");
    }

    #[test]
    fn orbits_stay_in_the_area_and_move() {
        let area = FleetArea::default();
        for i in 0..500 {
            let (lat, lon, heading) = area.orbit(i, 500, 37.0);
            assert!(distance_m((area.lat, area.lon), (lat, lon)) <= area.radius_m + 1.0);
            assert!((0.0..360.0).contains(&heading));
            let (lat2, lon2, _) = area.orbit(i, 500, 38.0);
            let step = distance_m((lat, lon), (lat2, lon2));
            assert!((step - 12.0).abs() < 0.1, "drone {i} moved {step} m in 1 s");
        }
    }
}

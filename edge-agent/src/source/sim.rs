//! A simulated drone: flies a closed route of waypoints (a loop or a lawnmower survey
//! pattern) around a home position, at a constant speed and altitude, heading along its
//! motion, its battery draining over a flight and swapped when low.
//!
//! Everything follows from the seed: the route's centre (spread within
//! [`SimConfig::area_radius_m`] of the home position, so a fleet covers an area), its
//! shape and size (within about 1.5 km of its centre), the starting point along it and
//! the battery level. The position is a pure function of the elapsed time, multiplied
//! by [`SimConfig::speedup`] for accelerated simulations.
//!
//! Its GNSS health is as simulated as its position: a 3D fix with 12 satellites used,
//! always ([`SIM_GNSS`]), so that maps and the cloud show the fields. No real source gets
//! a fixed health; no accuracy is made up.

use std::f64::consts::TAU;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use telemetry::{FixType, Gnss};

use super::{Fix, FixTime};

/// Metres per degree of latitude (and of longitude at the equator).
const METRES_PER_DEGREE: f64 = 111_320.0;
/// A full battery lasts this long in flight.
const FLIGHT_TIME: Duration = Duration::from_secs(25 * 60);
/// The battery is swapped when it reaches this level.
const BATTERY_SWAP_PCT: f64 = 20.0;
/// The simulator's GNSS health: a simulated 3D fix with a fixed 12 satellites.
const SIM_GNSS: Gnss = Gnss {
    fix: Some(FixType::Fix3d),
    sats: Some(12),
    sats_visible: None,
    h_acc_m: None,
};

/// The simulator's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Centre of the area, latitude in degrees.
    pub home_lat: f64,
    /// Centre of the area, longitude in degrees.
    pub home_lon: f64,
    /// Radius within which the route's centre is placed, metres (0: at home).
    pub area_radius_m: f64,
    /// Route seed.
    pub seed: u64,
    /// Ground speed, m/s.
    pub speed_mps: f64,
    /// Flight altitude (MSL), metres.
    pub altitude_m: f64,
    /// Simulated seconds per real second.
    pub speedup: f64,
}

impl Default for SimConfig {
    /// Seattle waterfront, 2 km area, 12 m/s at 120 m, real time.
    fn default() -> Self {
        SimConfig {
            home_lat: 47.6062,
            home_lon: -122.3321,
            area_radius_m: 2000.0,
            seed: 1,
            speed_mps: 12.0,
            altitude_m: 120.0,
            speedup: 1.0,
        }
    }
}

impl SimConfig {
    /// Checks the settings; the error says which one is wrong.
    pub fn check(&self) -> Result<(), String> {
        if !(self.home_lat.is_finite() && (-80.0..=80.0).contains(&self.home_lat)) {
            return Err(format!(
                "SIM_HOME_LAT {} is outside -80..=80 degrees",
                self.home_lat
            ));
        }
        if !(self.home_lon.is_finite() && (-180.0..=180.0).contains(&self.home_lon)) {
            return Err(format!(
                "SIM_HOME_LON {} is outside -180..=180 degrees",
                self.home_lon
            ));
        }
        if !(self.speed_mps.is_finite() && self.speed_mps > 0.0 && self.speed_mps < 100.0) {
            return Err(format!(
                "SIM_SPEED_MPS {} is not within (0, 100) m/s",
                self.speed_mps
            ));
        }
        if !(self.speedup.is_finite() && self.speedup > 0.0) {
            return Err(format!("SIM_SPEEDUP {} is not positive", self.speedup));
        }
        if !(self.area_radius_m.is_finite() && (0.0..=100_000.0).contains(&self.area_radius_m)) {
            return Err(format!(
                "area radius {} m is not within 0..=100 km",
                self.area_radius_m
            ));
        }
        Ok(())
    }
}

/// A route in local metres (east, north) around an origin.
#[derive(Debug, Clone)]
pub struct SimRoute {
    origin_lat: f64,
    origin_lon: f64,
    /// Closed polyline: the last leg returns to the first point.
    waypoints: Vec<(f64, f64)>,
    /// Cumulative distance at the start of each leg, and the total at the end.
    leg_starts: Vec<f64>,
    start_offset_m: f64,
    battery_offset: Duration,
    speed_mps: f64,
    altitude_m: f64,
    speedup: f64,
}

impl SimRoute {
    /// The route `config` describes.
    pub fn new(config: &SimConfig) -> SimRoute {
        let mut rng = StdRng::seed_from_u64(config.seed);
        let (centre_east, centre_north) = {
            let angle = rng.random_range(0.0..TAU);
            // sqrt: uniform over the disc, not crowded at its centre.
            let distance = config.area_radius_m * rng.random_range(0.0f64..1.0).sqrt();
            (distance * angle.sin(), distance * angle.cos())
        };
        let origin_lat = config.home_lat + centre_north / METRES_PER_DEGREE;
        let origin_lon =
            config.home_lon + centre_east / (METRES_PER_DEGREE * origin_lat.to_radians().cos());
        let waypoints = if rng.random_bool(0.5) {
            loop_route(&mut rng)
        } else {
            lawnmower_route(&mut rng)
        };
        let mut leg_starts = Vec::with_capacity(waypoints.len() + 1);
        let mut total = 0.0;
        for (i, from) in waypoints.iter().enumerate() {
            leg_starts.push(total);
            let to = waypoints[(i + 1) % waypoints.len()];
            total += (to.0 - from.0).hypot(to.1 - from.1);
        }
        leg_starts.push(total);
        SimRoute {
            origin_lat,
            origin_lon,
            start_offset_m: rng.random_range(0.0..total),
            battery_offset: FLIGHT_TIME.mul_f64(rng.random_range(0.0..0.5)),
            waypoints,
            leg_starts,
            speed_mps: config.speed_mps,
            altitude_m: config.altitude_m + rng.random_range(-10.0..10.0),
            speedup: config.speedup,
        }
    }

    /// The route's length, metres.
    pub fn length_m(&self) -> f64 {
        *self.leg_starts.last().expect("at least one leg")
    }

    /// The fix after `elapsed` real time (scaled by the speed-up), stamped `time`.
    pub fn fix_after(&self, elapsed: Duration, time: DateTime<Utc>) -> Fix {
        let flown = elapsed.mul_f64(self.speedup);
        let distance = (self.start_offset_m + flown.as_secs_f64() * self.speed_mps)
            .rem_euclid(self.length_m());
        let leg = self
            .leg_starts
            .partition_point(|start| *start <= distance)
            .saturating_sub(1)
            .min(self.waypoints.len() - 1);
        let from = self.waypoints[leg];
        let to = self.waypoints[(leg + 1) % self.waypoints.len()];
        let leg_len = self.leg_starts[leg + 1] - self.leg_starts[leg];
        let t = if leg_len > 0.0 {
            (distance - self.leg_starts[leg]) / leg_len
        } else {
            0.0
        };
        let east = from.0 + (to.0 - from.0) * t;
        let north = from.1 + (to.1 - from.1) * t;
        let heading = (to.0 - from.0)
            .atan2(to.1 - from.1)
            .to_degrees()
            .rem_euclid(360.0);
        let lat = self.origin_lat + north / METRES_PER_DEGREE;
        let lon = self.origin_lon + east / (METRES_PER_DEGREE * self.origin_lat.to_radians().cos());
        let flight = (flown + self.battery_offset).as_secs_f64() % FLIGHT_TIME.as_secs_f64();
        let battery = 100.0 - (100.0 - BATTERY_SWAP_PCT) * flight / FLIGHT_TIME.as_secs_f64();
        Fix {
            time: FixTime::Board(time),
            lat,
            lon,
            alt_m: Some(self.altitude_m),
            heading_deg: Some(heading),
            speed_mps: Some(self.speed_mps),
            battery_pct: Some(battery.round().clamp(0.0, 100.0) as u8),
            gnss: SIM_GNSS,
        }
    }
}

/// A loop through 5 to 9 points on a jittered circle of 300 m to 1.5 km radius.
fn loop_route(rng: &mut StdRng) -> Vec<(f64, f64)> {
    let count = rng.random_range(5..=9);
    let radius = rng.random_range(300.0..1500.0);
    let rotation = rng.random_range(0.0..TAU);
    (0..count)
        .map(|i| {
            let angle = rotation + TAU * f64::from(i) / f64::from(count);
            let r = radius * rng.random_range(0.7..1.0);
            (r * angle.sin(), r * angle.cos())
        })
        .collect()
}

/// A survey pattern: 4 to 8 parallel passes 60 to 150 m apart, 400 m to 1.5 km long,
/// rotated at random, closed by the flight back to the first pass.
fn lawnmower_route(rng: &mut StdRng) -> Vec<(f64, f64)> {
    let passes: u32 = rng.random_range(4..=8);
    let spacing = rng.random_range(60.0..150.0);
    let length = rng.random_range(400.0..1500.0);
    let rotation: f64 = rng.random_range(0.0..TAU);
    let (sin, cos) = rotation.sin_cos();
    let width = spacing * f64::from(passes - 1);
    let mut points = Vec::with_capacity(passes as usize * 2);
    for pass in 0..passes {
        let x = f64::from(pass) * spacing - width / 2.0;
        let (y0, y1) = if pass % 2 == 0 {
            (-length / 2.0, length / 2.0)
        } else {
            (length / 2.0, -length / 2.0)
        };
        for y in [y0, y1] {
            points.push((x * cos - y * sin, x * sin + y * cos));
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(route: &SimRoute, secs: f64) -> Fix {
        route.fix_after(Duration::from_secs_f64(secs), Utc::now())
    }

    /// Distance in metres between two fixes (equirectangular, fine at these scales).
    fn distance(a: &Fix, b: &Fix) -> f64 {
        let north = (b.lat - a.lat) * METRES_PER_DEGREE;
        let east = (b.lon - a.lon) * METRES_PER_DEGREE * a.lat.to_radians().cos();
        north.hypot(east)
    }

    #[test]
    fn the_same_seed_flies_the_same_route() {
        let config = SimConfig::default();
        let a = SimRoute::new(&config);
        let b = SimRoute::new(&config);
        assert_eq!(at(&a, 100.0).lat, at(&b, 100.0).lat);
        let other = SimRoute::new(&SimConfig { seed: 2, ..config });
        assert_ne!(at(&a, 100.0).lat, at(&other, 100.0).lat);
    }

    #[test]
    fn moves_at_its_speed_in_its_heading() {
        for seed in 0..20 {
            let config = SimConfig {
                seed,
                ..SimConfig::default()
            };
            let route = SimRoute::new(&config);
            let mut straight = 0;
            for step in 0..200 {
                let t = f64::from(step) * 7.0;
                let (a, b) = (at(&route, t), at(&route, t + 1.0));
                // Metres as the route converts them (exact, unlike `distance`).
                let cos = route.origin_lat.to_radians().cos();
                let north = (b.lat - a.lat) * METRES_PER_DEGREE;
                let east = (b.lon - a.lon) * METRES_PER_DEGREE * cos;
                let moved = north.hypot(east);
                // Never faster than the speed; exactly the speed except across a corner.
                assert!(
                    moved <= config.speed_mps * 1.01,
                    "seed {seed}: {moved} m in 1 s"
                );
                if (moved - config.speed_mps).abs() < 1e-3 {
                    straight += 1;
                    let bearing = east.atan2(north).to_degrees().rem_euclid(360.0);
                    let heading = a.heading_deg.unwrap();
                    let diff = (bearing - heading + 540.0).rem_euclid(360.0) - 180.0;
                    assert!(
                        diff.abs() < 1.0,
                        "seed {seed}: heading {heading}, bearing {bearing}"
                    );
                }
            }
            assert!(
                straight > 150,
                "seed {seed}: only {straight} straight steps"
            );
        }
    }

    #[test]
    fn a_fleet_spreads_over_its_area_and_stays_near_home() {
        let config = SimConfig::default();
        let home = Fix {
            lat: config.home_lat,
            lon: config.home_lon,
            ..at(&SimRoute::new(&config), 0.0)
        };
        let distances: Vec<f64> = (0..200)
            .map(|seed| {
                distance(
                    &home,
                    &at(
                        &SimRoute::new(&SimConfig {
                            seed,
                            ..config.clone()
                        }),
                        0.0,
                    ),
                )
            })
            .collect();
        assert!(distances.iter().all(|d| *d < config.area_radius_m + 1600.0));
        let near = distances.iter().filter(|d| **d < 1000.0).count();
        assert!(
            (5..150).contains(&near),
            "{near} of 200 within 1 km of home"
        );
    }

    #[test]
    fn speedup_scales_time_and_the_battery_drains() {
        let config = SimConfig::default();
        let fast = SimRoute::new(&SimConfig {
            speedup: 10.0,
            ..config.clone()
        });
        let slow = SimRoute::new(&config);
        assert_eq!(at(&fast, 10.0).lat, at(&slow, 100.0).lat);
        let start = at(&slow, 0.0).battery_pct.unwrap();
        let later = at(&slow, 300.0).battery_pct.unwrap();
        assert!(later < start || start < 30, "{start} -> {later}");
        for t in (0..3000).step_by(37) {
            let pct = at(&slow, f64::from(t)).battery_pct.unwrap();
            assert!((20..=100).contains(&pct));
        }
    }

    #[test]
    fn wrong_settings_are_named() {
        let bad = SimConfig {
            speed_mps: -1.0,
            ..SimConfig::default()
        };
        assert!(bad.check().unwrap_err().contains("SIM_SPEED_MPS"));
        let bad = SimConfig {
            home_lat: 91.0,
            ..SimConfig::default()
        };
        assert!(bad.check().unwrap_err().contains("SIM_HOME_LAT"));
    }
}

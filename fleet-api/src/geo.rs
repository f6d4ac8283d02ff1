//! The areas a request names, checked: a point with a radius, a bounding box, a polygon.
//! Every check says what is wrong, so that the API can answer 400 with it. Turns valid
//! areas into the GeoJSON Cosmos DB's spatial functions take (longitude first, outer ring
//! counter-clockwise as Cosmos DB requires). GeoJSON is read and written by the `geojson`
//! crate.

use geojson::{GeoJson, GeometryValue};
use serde_json::Value;

/// Most vertices of a polygon a request may send.
pub const MAX_POLYGON_VERTICES: usize = 1000;

/// A request's input that cannot be used; the message says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Largest request body (an area: a polygon or a geofence), bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

fn bad(message: impl Into<String>) -> BadInput {
    BadInput(message.into())
}

/// A WGS-84 position in degrees.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LonLat {
    /// Longitude, -180 to 180.
    pub lon: f64,
    /// Latitude, -90 to 90.
    pub lat: f64,
}

impl LonLat {
    /// A checked position; `what` names it in messages.
    pub fn new(lon: f64, lat: f64, what: &str) -> Result<Self, BadInput> {
        if !(lat.is_finite() && (-90.0..=90.0).contains(&lat)) {
            return Err(bad(format!(
                "{what}: latitude {lat} is out of range (-90 to 90)"
            )));
        }
        if !(lon.is_finite() && (-180.0..=180.0).contains(&lon)) {
            return Err(bad(format!(
                "{what}: longitude {lon} is out of range (-180 to 180)"
            )));
        }
        Ok(Self { lon, lat })
    }

    /// The GeoJSON Point.
    pub fn to_geojson(self) -> Value {
        Value::from(&GeometryValue::new_point([self.lon, self.lat]))
    }

    /// The great-circle distance to `other`, metres (haversine on the mean Earth radius,
    /// as Cosmos DB's `ST_DISTANCE` measures on its sphere).
    pub fn distance_m(self, other: LonLat) -> f64 {
        const EARTH_M: f64 = 6_371_008.8;
        let (p1, p2) = (self.lat.to_radians(), other.lat.to_radians());
        let dp = p2 - p1;
        let dl = (other.lon - self.lon).to_radians();
        let a = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
        2.0 * EARTH_M * a.sqrt().asin()
    }
}

/// Parses one number of a request; `name` names it in messages.
pub fn number(name: &str, text: &str) -> Result<f64, BadInput> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| bad(format!("{name}: '{text}' is not a number")))
}

/// A radius in metres, above 0 and at most `max_m`.
pub fn radius(text: &str, max_m: f64) -> Result<f64, BadInput> {
    let r = number("radius_m", text)?;
    if r <= 0.0 {
        return Err(bad(format!("radius_m: {r} must be above 0")));
    }
    if r > max_m {
        return Err(bad(format!(
            "radius_m: {r} is above the largest radius this API answers, {max_m} m"
        )));
    }
    Ok(r)
}

/// A polygon: one outer ring, closed, counter-clockwise, without holes.
#[derive(Debug, Clone, PartialEq)]
pub struct Polygon {
    ring: Vec<LonLat>,
}

impl Polygon {
    /// Whether `p` is inside the ring (even-odd rule on longitude and latitude as plane
    /// coordinates: exact enough for fences of a few kilometres away from the poles and the
    /// antimeridian).
    pub fn contains(&self, p: LonLat) -> bool {
        let mut inside = false;
        for pair in self.ring.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if (a.lat > p.lat) != (b.lat > p.lat)
                && p.lon < a.lon + (p.lat - a.lat) / (b.lat - a.lat) * (b.lon - a.lon)
            {
                inside = !inside;
            }
        }
        inside
    }

    /// The distance from `p` to the ring's nearest edge, metres (on a plane tangent at `p`:
    /// exact enough for margins of metres to a few hundred metres).
    pub fn border_distance_m(&self, p: LonLat) -> f64 {
        const M_PER_DEG: f64 = 6_371_008.8 * std::f64::consts::PI / 180.0;
        let cos = p.lat.to_radians().cos();
        let local = |q: LonLat| {
            (
                (q.lon - p.lon) * M_PER_DEG * cos,
                (q.lat - p.lat) * M_PER_DEG,
            )
        };
        self.ring
            .windows(2)
            .map(|pair| {
                let ((ax, ay), (bx, by)) = (local(pair[0]), local(pair[1]));
                let (dx, dy) = (bx - ax, by - ay);
                let length2 = dx * dx + dy * dy;
                let t = if length2 > 0.0 {
                    (-(ax * dx + ay * dy) / length2).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                (ax + t * dx).hypot(ay + t * dy)
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// The box `minLon,minLat,maxLon,maxLat` (the `bbox` order of GeoJSON).
    pub fn from_bbox(text: &str) -> Result<Self, BadInput> {
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() != 4 {
            return Err(bad(format!(
                "bbox: '{text}' is not minLon,minLat,maxLon,maxLat (4 numbers, {} given)",
                parts.len()
            )));
        }
        let names = ["minLon", "minLat", "maxLon", "maxLat"];
        let mut v = [0.0; 4];
        for (i, part) in parts.iter().enumerate() {
            v[i] = number(&format!("bbox {}", names[i]), part)?;
        }
        let min = LonLat::new(v[0], v[1], "bbox min corner")?;
        let max = LonLat::new(v[2], v[3], "bbox max corner")?;
        if min.lon >= max.lon {
            return Err(bad(format!(
                "bbox: minLon {} must be below maxLon {} (boxes across the antimeridian are not supported)",
                min.lon, max.lon
            )));
        }
        if min.lat >= max.lat {
            return Err(bad(format!(
                "bbox: minLat {} must be below maxLat {}",
                min.lat, max.lat
            )));
        }
        let corner = |lon, lat| LonLat { lon, lat };
        Ok(Self {
            ring: vec![
                corner(min.lon, min.lat),
                corner(max.lon, min.lat),
                corner(max.lon, max.lat),
                corner(min.lon, max.lat),
                corner(min.lon, min.lat),
            ],
        })
    }

    /// A GeoJSON Polygon geometry, or a Feature holding one, read by the `geojson` crate.
    /// Holes are refused; the outer ring is turned counter-clockwise if it is not.
    pub fn from_geojson(value: &Value) -> Result<Self, BadInput> {
        let geometry = match serde_json::from_value::<GeoJson>(value.clone()) {
            Ok(GeoJson::Geometry(geometry)) => geometry,
            Ok(GeoJson::Feature(feature)) => feature
                .geometry
                .ok_or_else(|| bad("polygon: the Feature has no geometry"))?,
            Ok(GeoJson::FeatureCollection(_)) => {
                return Err(bad(
                    "polygon: a FeatureCollection is not a Polygon or a Feature holding one",
                ));
            }
            Err(err) => {
                return Err(bad(format!(
                    "polygon: not a GeoJSON Polygon or a Feature holding one: {err}"
                )));
            }
        };
        let mut rings = match geometry.value {
            GeometryValue::Polygon { coordinates } => coordinates,
            other => {
                return Err(bad(format!(
                    "polygon: type '{}' is not a Polygon or a Feature holding one",
                    other.type_name()
                )));
            }
        };
        match rings.len() {
            0 => return Err(bad("polygon: no ring given")),
            1 => {}
            n => {
                return Err(bad(format!(
                    "polygon: {n} rings given; holes are not supported, send one outer ring"
                )));
            }
        }
        let points = rings.swap_remove(0);
        if points.len() > MAX_POLYGON_VERTICES + 1 {
            return Err(bad(format!(
                "polygon: {} positions; at most {MAX_POLYGON_VERTICES} vertices are accepted",
                points.len()
            )));
        }
        let mut ring = Vec::with_capacity(points.len());
        for (i, position) in points.iter().enumerate() {
            let &[lon, lat, ..] = position.as_slice() else {
                return Err(bad(format!(
                    "polygon: position {i} is not [longitude, latitude]"
                )));
            };
            ring.push(LonLat::new(lon, lat, &format!("polygon position {i}"))?);
        }
        if ring.len() < 4 {
            return Err(bad(format!(
                "polygon: the ring has {} positions; a closed ring needs at least 4 (the first repeated last)",
                ring.len()
            )));
        }
        if ring.first() != ring.last() {
            return Err(bad(
                "polygon: the ring is not closed (its last position must repeat its first)",
            ));
        }
        let area = signed_area(&ring);
        if area == 0.0 {
            return Err(bad("polygon: the ring encloses no area"));
        }
        if area < 0.0 {
            ring.reverse();
        }
        Ok(Self { ring })
    }

    /// The GeoJSON Polygon.
    pub fn to_geojson(&self) -> Value {
        let ring = self.ring.iter().map(|p| [p.lon, p.lat]);
        Value::from(&GeometryValue::new_polygon([ring]))
    }
}

/// Twice the signed area of a ring in the longitude/latitude plane (shoelace): positive
/// when counter-clockwise.
fn signed_area(ring: &[LonLat]) -> f64 {
    ring.windows(2)
        .map(|w| w[0].lon * w[1].lat - w[1].lon * w[0].lat)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn checks_coordinates_and_radius() {
        assert!(LonLat::new(-122.1, 47.6, "p").is_ok());
        let err = LonLat::new(10.0, 91.0, "point").unwrap_err().0;
        assert!(err.contains("latitude 91"), "{err}");
        let err = LonLat::new(181.0, 0.0, "point").unwrap_err().0;
        assert!(err.contains("longitude 181"), "{err}");
        assert!(LonLat::new(f64::NAN, 0.0, "p").is_err());
        assert_eq!(radius("1000", 5000.0), Ok(1000.0));
        assert!(radius("0", 5000.0).unwrap_err().0.contains("above 0"));
        assert!(radius("6000", 5000.0).unwrap_err().0.contains("largest"));
        assert!(radius("x", 5000.0).unwrap_err().0.contains("not a number"));
        assert!(radius("inf", 5000.0).is_err());
    }

    #[test]
    fn border_distance_is_to_the_nearest_edge() {
        let p = Polygon::from_bbox("0,0,0.01,0.01").unwrap();
        // 0.001 degree of latitude is about 111 m, from anywhere.
        let centre_left = LonLat::new(0.001, 0.005, "p").unwrap();
        assert!((p.border_distance_m(centre_left) - 111.2).abs() < 0.5);
        let outside = LonLat::new(0.005, -0.002, "p").unwrap();
        assert!(!p.contains(outside));
        assert!((p.border_distance_m(outside) - 222.4).abs() < 0.5);
        let corner = LonLat::new(-0.001, -0.001, "p").unwrap();
        assert!((p.border_distance_m(corner) - 111.2 * 2f64.sqrt()).abs() < 1.0);
    }

    #[test]
    fn bbox_becomes_a_counter_clockwise_polygon() {
        let p = Polygon::from_bbox("-122.2,47.6,-122.0,47.7").unwrap();
        assert_eq!(
            p.to_geojson(),
            json!({"type":"Polygon","coordinates":[[[-122.2,47.6],[-122.0,47.6],[-122.0,47.7],[-122.2,47.7],[-122.2,47.6]]]})
        );
        assert!(signed_area(&p.ring) > 0.0);
        for (text, says) in [
            ("1,2,3", "4 numbers"),
            ("a,2,3,4", "minLon"),
            ("3,2,1,4", "below maxLon"),
            ("1,4,3,2", "below maxLat"),
            ("1,2,3,95", "latitude 95"),
        ] {
            let err = Polygon::from_bbox(text).unwrap_err().0;
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn polygons_are_checked_and_turned_counter_clockwise() {
        let cw = json!({"type":"Polygon","coordinates":[[[0,0],[0,1],[1,1],[1,0],[0,0]]]});
        let p = Polygon::from_geojson(&cw).unwrap();
        assert!(signed_area(&p.ring) > 0.0);
        let feature = json!({"type":"Feature","geometry":cw,"properties":{}});
        assert_eq!(Polygon::from_geojson(&feature).unwrap(), p);
        for (body, says) in [
            (json!({"type":"Point","coordinates":[0,0]}), "not a Polygon"),
            (json!([1, 2]), "not a GeoJSON Polygon"),
            (
                json!({"type":"Polygon","coordinates":[[[0,0],[1,1],[0,0]]]}),
                "at least 4",
            ),
            (
                json!({"type":"Polygon","coordinates":[[[0,0],[0,1],[1,1],[1,0]]]}),
                "not closed",
            ),
            (
                json!({"type":"Polygon","coordinates":[[[0,0],[0,100],[1,1],[0,0]]]}),
                "latitude 100",
            ),
            (
                json!({"type":"Polygon","coordinates":[[[0,0],[1,1],[2,2],[0,0]]]}),
                "no area",
            ),
            (
                json!({"type":"Polygon","coordinates":[[[0,0],[0,1],[1,1],[0,0]],[[0,0],[0,1],[1,1],[0,0]]]}),
                "holes",
            ),
            (
                json!({"type":"Polygon","coordinates":[[[0,"a"],[0,1],[1,1],[0,0]]]}),
                "string \"a\", expected f64",
            ),
        ] {
            let err = Polygon::from_geojson(&body).unwrap_err().0;
            assert!(err.contains(says), "{body}: {err}");
        }
    }

    proptest! {
        /// Any JSON is answered with a polygon or a message, never a panic.
        #[test]
        fn any_json_is_answered(text in "\\PC{0,80}", n in -1e3f64..1e3) {
            let _ = Polygon::from_bbox(&text);
            let _ = radius(&text, 1000.0);
            let body = json!({"type":"Polygon","coordinates":[[[n, n], [n, 1], [text.clone(), 2], [n, n]]]});
            let _ = Polygon::from_geojson(&body);
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                let _ = Polygon::from_geojson(&v);
            }
        }
    }
}

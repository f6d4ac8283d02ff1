//! Geospatial functions on GeoJSON (longitude first, WGS-84 degrees): great-circle distance
//! (telemetry's haversine, on a sphere of the mean Earth radius), and point-in-polygon.

use serde_json::Value;

pub use telemetry::geo::{LonLat, haversine_m};

/// The coordinates of a GeoJSON Point.
pub fn point(v: &Value) -> Option<LonLat> {
    if v.get("type")?.as_str()? != "Point" {
        return None;
    }
    let c = v.get("coordinates")?.as_array()?;
    Some((c.first()?.as_f64()?, c.get(1)?.as_f64()?))
}

/// Whether a point lies inside a GeoJSON Polygon (first ring the outline, later rings holes)
/// or MultiPolygon; `None` if the area is not one of those.
pub fn within(p: LonLat, area: &Value) -> Option<bool> {
    let coords = area.get("coordinates")?.as_array()?;
    match area.get("type")?.as_str()? {
        "Polygon" => polygon_contains(p, coords),
        "MultiPolygon" => {
            let mut inside = false;
            for poly in coords {
                inside |= polygon_contains(p, poly.as_array()?)?;
            }
            Some(inside)
        }
        _ => None,
    }
}

fn polygon_contains(p: LonLat, rings: &[Value]) -> Option<bool> {
    let mut inside = false;
    for (i, ring) in rings.iter().enumerate() {
        let in_ring = ring_contains(p, ring.as_array()?)?;
        if i == 0 {
            inside = in_ring;
        } else if in_ring {
            inside = false;
        }
    }
    Some(inside)
}

/// Ray casting in the longitude/latitude plane.
fn ring_contains(p: LonLat, ring: &[Value]) -> Option<bool> {
    let pts: Vec<LonLat> = ring
        .iter()
        .map(|c| {
            let c = c.as_array()?;
            Some((c.first()?.as_f64()?, c.get(1)?.as_f64()?))
        })
        .collect::<Option<_>>()?;
    let mut inside = false;
    let mut j = pts.len().checked_sub(1)?;
    for i in 0..pts.len() {
        let (xi, yi) = pts[i];
        let (xj, yj) = pts[j];
        if (yi > p.1) != (yj > p.1) && p.0 < (xj - xi) * (p.1 - yi) / (yj - yi) + xi {
            inside = !inside;
        }
        j = i;
    }
    Some(inside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn point_in_polygon_with_hole() {
        let poly = json!({"type":"Polygon","coordinates":[
            [[0.0,0.0],[10.0,0.0],[10.0,10.0],[0.0,10.0],[0.0,0.0]],
            [[4.0,4.0],[6.0,4.0],[6.0,6.0],[4.0,6.0],[4.0,4.0]]]});
        assert_eq!(within((1.0, 1.0), &poly), Some(true));
        assert_eq!(within((5.0, 5.0), &poly), Some(false));
        assert_eq!(within((11.0, 5.0), &poly), Some(false));
        assert_eq!(
            within((1.0, 1.0), &json!({"type":"Point","coordinates":[0,0]})),
            None
        );
    }
}

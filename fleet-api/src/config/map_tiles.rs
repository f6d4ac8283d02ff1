//! The map's base map settings (`MAP_TILE_URL`, `MAP_TILE_ATTRIBUTION`, `MAP_TILE_KEY`),
//! resolved into [`MapTiles`].

use settings::{ConfigError, Secret};
use url::Url;

use crate::map::MapTiles;

/// The base map, or none when `MAP_TILE_URL` is not set (then neither may the others be).
pub fn map_tiles(
    url: Option<String>,
    attribution: Option<String>,
    key: Option<Secret>,
) -> Result<Option<MapTiles>, ConfigError> {
    let Some(template) = url.filter(|u| !u.trim().is_empty()) else {
        return match (attribution, key) {
            (None, None) => Ok(None),
            _ => Err(ConfigError::Missing {
                name: "MAP_TILE_URL",
                hint: "the tile server's XYZ template that MAP_TILE_ATTRIBUTION or MAP_TILE_KEY belong to",
            }),
        };
    };
    let invalid = |why: &str| ConfigError::Invalid {
        name: "MAP_TILE_URL",
        message: format!(
            "'{template}' {why}: write an http(s) URL template with {{z}}, {{x}} and {{y}}, \
             e.g. https://tiles.example.com/{{z}}/{{x}}/{{y}}.png"
        ),
    };
    if !["{z}", "{x}", "{y}"].iter().all(|p| template.contains(p)) {
        return Err(invalid("lacks one of {z}, {x}, {y}"));
    }
    let filled = template
        .replace("{z}", "0")
        .replace("{x}", "0")
        .replace("{y}", "0");
    if filled.contains(['{', '}']) {
        return Err(invalid("has a placeholder other than {z}, {x}, {y}"));
    }
    let parsed = Url::parse(&filled).map_err(|_| invalid("is not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(invalid("is not an http(s) URL with a host"));
    }
    let origin = parsed.origin().ascii_serialization();
    let attribution = attribution
        .filter(|a| !a.trim().is_empty())
        .unwrap_or_else(|| format!("Base map: {origin}"));
    Ok(Some(MapTiles {
        template,
        origin,
        attribution,
        key,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_needs_z_x_y_and_a_host() {
        let tiles = map_tiles(
            Some("http://127.0.0.1:8081/tiles/{z}/{x}/{y}.png".into()),
            None,
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(tiles.origin, "http://127.0.0.1:8081");
        assert_eq!(tiles.attribution, "Base map: http://127.0.0.1:8081");
        for wrong in [
            "http://tiles/{z}/{x}.png",
            "https://{s}.tile.example.com/{z}/{x}/{y}.png",
            "file:///tiles/{z}/{x}/{y}.png",
            "tiles/{z}/{x}/{y}.png",
        ] {
            let err = map_tiles(Some(wrong.into()), None, None).unwrap_err();
            assert!(err.to_string().contains("MAP_TILE_URL"), "{wrong}: {err}");
        }
        let err = map_tiles(None, Some("© someone".into()), None).unwrap_err();
        assert!(err.to_string().contains("MAP_TILE_URL"), "{err}");
        assert_eq!(map_tiles(None, None, None).unwrap(), None);
    }
}

//! The map's base map settings (`MAP_TILE_URL`, `MAP_TILE_ATTRIBUTION`, and Azure Maps'
//! authentication: `MAP_TILE_KEY` or `MAP_TILE_CLIENT_ID`), resolved into [`MapTiles`].

use std::sync::Arc;

use entra_credential::{EntraCredential, Source};
use settings::{ConfigError, Secret};
use url::Url;

use crate::tiles::{MapTiles, TileAuth};

/// The base map, or none when `MAP_TILE_URL` is not set (then neither may the others be).
/// With `key` or `client_id` (one of them) the API fetches the tiles for the page; with
/// `client_id`, with Entra ID tokens of the credential `AZURE_CREDENTIAL` chooses.
pub fn map_tiles(
    url: Option<String>,
    attribution: Option<String>,
    key: Option<Secret>,
    client_id: Option<String>,
) -> Result<Option<MapTiles>, ConfigError> {
    let client_id = client_id.filter(|c| !c.trim().is_empty());
    let Some(template) = url.filter(|u| !u.trim().is_empty()) else {
        return match (attribution, key, client_id) {
            (None, None, None) => Ok(None),
            _ => Err(ConfigError::Missing {
                name: "MAP_TILE_URL",
                hint: "the tile server's XYZ template that MAP_TILE_ATTRIBUTION, MAP_TILE_KEY or MAP_TILE_CLIENT_ID belong to",
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
    let auth = match (key, client_id) {
        (None, None) => TileAuth::None,
        (Some(key), None) => TileAuth::Key(key),
        (None, Some(client_id)) => TileAuth::Entra {
            credential: Arc::new(maps_credential()?),
            client_id,
        },
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid {
                name: "MAP_TILE_CLIENT_ID",
                message: "is set with MAP_TILE_KEY: set one, the client id for Entra ID \
                          (the API's identity holds Azure Maps Data Reader) or the key"
                    .into(),
            });
        }
    };
    Ok(Some(MapTiles {
        template,
        origin,
        attribution,
        auth,
    }))
}

/// The API's Entra ID credential for Azure Maps.
fn maps_credential() -> Result<EntraCredential, ConfigError> {
    let invalid = |e: entra_credential::EntraError| ConfigError::Invalid {
        name: "MAP_TILE_CLIENT_ID",
        message: format!("Azure Maps with Entra ID needs the API's credential: {e}"),
    };
    EntraCredential::new(Source::from_env().map_err(invalid)?).map_err(invalid)
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
            let err = map_tiles(Some(wrong.into()), None, None, None).unwrap_err();
            assert!(err.to_string().contains("MAP_TILE_URL"), "{wrong}: {err}");
        }
        let err = map_tiles(None, Some("© someone".into()), None, None).unwrap_err();
        assert!(err.to_string().contains("MAP_TILE_URL"), "{err}");
        let err = map_tiles(None, None, None, Some("maps-account".into())).unwrap_err();
        assert!(err.to_string().contains("MAP_TILE_URL"), "{err}");
        assert_eq!(map_tiles(None, None, None, None).unwrap(), None);
    }

    #[test]
    fn a_key_or_a_client_id_has_the_api_fetch_the_tiles_but_not_both() {
        let azure = "https://atlas.microsoft.com/map/tile?api-version=2024-04-01&tilesetId=microsoft.base.road&zoom={z}&x={x}&y={y}";
        let keyed = map_tiles(Some(azure.into()), None, Some(Secret::new("k")), None)
            .unwrap()
            .unwrap();
        assert_eq!(keyed.auth, TileAuth::Key(Secret::new("k")));
        assert!(keyed.proxied());
        let plain = map_tiles(Some(azure.into()), None, None, None)
            .unwrap()
            .unwrap();
        assert!(!plain.proxied());
        let err = map_tiles(
            Some(azure.into()),
            None,
            Some(Secret::new("k")),
            Some("maps-account".into()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("MAP_TILE_KEY"), "{err}");
    }
}

//! Where alerts go, resolved: the webhooks (`ALERT_WEBHOOK_URLS`) and the Event Grid topic
//! with how its requests are authorized (`ALERT_EVENTGRID_ENDPOINT`, `ALERT_EVENTGRID_AUTH`,
//! `ALERT_EVENTGRID_KEY`).

use serde::Deserialize;
use settings::{ConfigError, Secret};
use url::Url;

/// How Event Grid requests are authorized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GridAuth {
    /// The topic's access key (`ALERT_EVENTGRID_KEY`), as `aeg-sas-key`.
    #[default]
    Key,
    /// Entra ID tokens (role "EventGrid Data Sender").
    Entra,
}

/// The Event Grid topic, resolved.
#[derive(Debug, Clone)]
pub enum GridConfig {
    /// With its access key.
    Key(Url, Secret),
    /// With Entra ID tokens.
    Entra(Url),
}

/// The webhook URLs of a comma-separated list, each http(s).
pub fn webhooks(text: Option<&str>) -> Result<Vec<Url>, ConfigError> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match Url::parse(s) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(url),
            _ => Err(ConfigError::Invalid {
                name: "ALERT_WEBHOOK_URLS",
                message: format!(
                    "{s:?} is not an http(s) URL: write https://host/path, comma-separated"
                ),
            }),
        })
        .collect()
}

/// The Event Grid topic, if one is given: its endpoint with a key (`ALERT_EVENTGRID_AUTH=key`,
/// the default) or without one (`entra`).
pub fn event_grid(
    endpoint: Option<Url>,
    auth: Option<GridAuth>,
    key: Option<Secret>,
) -> Result<Option<GridConfig>, ConfigError> {
    Ok(match (endpoint, auth.unwrap_or_default(), key) {
        (None, _, None) => None,
        (None, _, Some(_)) => {
            return Err(ConfigError::Missing {
                name: "ALERT_EVENTGRID_ENDPOINT",
                hint: "ALERT_EVENTGRID_KEY is set: also set the topic endpoint, or remove the key",
            });
        }
        (Some(url), GridAuth::Key, Some(key)) => Some(GridConfig::Key(url, key)),
        (Some(_), GridAuth::Key, None) => {
            return Err(ConfigError::Missing {
                name: "ALERT_EVENTGRID_KEY",
                hint: "the topic's access key (environment or ALERT_EVENTGRID_KEY_FILE), or ALERT_EVENTGRID_AUTH=entra",
            });
        }
        (Some(url), GridAuth::Entra, None) => Some(GridConfig::Entra(url)),
        (Some(_), GridAuth::Entra, Some(_)) => {
            return Err(ConfigError::Invalid {
                name: "ALERT_EVENTGRID_AUTH",
                message: "entra takes no key, but ALERT_EVENTGRID_KEY is set: remove the key, or write ALERT_EVENTGRID_AUTH=key".into(),
            });
        }
    })
}

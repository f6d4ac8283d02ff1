//! Who may read, as the settings say: the bearer tokens' issuer and audience, the API key
//! file read and checked at start, and at least one way in.

use url::Url;

use crate::access::{AccessConfig, ApiKeys, KeyError, OidcSettings};
use settings::ConfigError;

/// The issuer and audience of bearer tokens: both or neither, the issuer over https unless
/// it is on this host.
pub(super) fn oidc(
    issuer: Option<String>,
    audience: Option<String>,
) -> Result<Option<OidcSettings>, ConfigError> {
    let (issuer, audience) = match (issuer, audience) {
        (None, None) => return Ok(None),
        (Some(issuer), Some(audience)) => (issuer, audience),
        (Some(_), None) => {
            return Err(ConfigError::Missing {
                name: "API_OIDC_AUDIENCE",
                hint: "the audience tokens must name (the API's application id or id URI)",
            });
        }
        (None, Some(_)) => {
            return Err(ConfigError::Missing {
                name: "API_OIDC_ISSUER",
                hint: "the issuer of the tokens API_OIDC_AUDIENCE is for",
            });
        }
    };
    let url = Url::parse(&issuer).map_err(|e| ConfigError::Invalid {
        name: "API_OIDC_ISSUER",
        message: format!("'{issuer}' is not a URL ({e})"),
    })?;
    if url.scheme() != "https" && !(url.scheme() == "http" && settings::is_loopback(&url)) {
        return Err(ConfigError::Invalid {
            name: "API_OIDC_ISSUER",
            message: format!("'{issuer}' must be https:// (http:// only on this host)"),
        });
    }
    if audience.trim().is_empty() {
        return Err(ConfigError::Invalid {
            name: "API_OIDC_AUDIENCE",
            message: "is empty".into(),
        });
    }
    Ok(Some(OidcSettings { issuer, audience }))
}

/// The access rules: the key file read and checked, and at least one way in.
pub(super) fn access(
    keys_file: Option<&std::path::Path>,
    oidc: Option<OidcSettings>,
    anonymous: Option<bool>,
) -> Result<AccessConfig, ConfigError> {
    let keys = match keys_file {
        Some(path) => ApiKeys::load(path)
            .and_then(|keys| {
                if keys.is_empty() {
                    Err(KeyError::Empty)
                } else {
                    Ok(keys)
                }
            })
            .map_err(|e| ConfigError::Invalid {
                name: "API_KEYS_FILE",
                message: e.to_string(),
            })?,
        None => ApiKeys::default(),
    };
    let anonymous = anonymous.unwrap_or(false);
    if keys.is_empty() && oidc.is_none() && !anonymous {
        return Err(ConfigError::Missing {
            name: "API_OIDC_ISSUER, API_KEYS_FILE or API_ALLOW_ANONYMOUS",
            hint: "nobody could read the fleet; set API_OIDC_ISSUER and API_OIDC_AUDIENCE \
                   (bearer tokens), API_KEYS_FILE (keys for scripts), or \
                   API_ALLOW_ANONYMOUS=true to let anyone read",
        });
    }
    Ok(AccessConfig {
        keys,
        oidc,
        anonymous,
    })
}

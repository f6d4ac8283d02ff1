//! The Cosmos DB account settings, read the same way by every program that talks to the
//! account (the writer, the read API): `COSMOS_ENDPOINT`, and the key from `COSMOS_KEY` or
//! the file `COSMOS_KEY_FILE` names, never a flag.

use url::Url;

use crate::{ConfigError, Secret, SecretError, secret_from_env};

/// The account key from `COSMOS_KEY`, or the file `COSMOS_KEY_FILE` names (`-`: standard
/// input).
pub fn cosmos_key_from_env() -> Result<Option<Secret>, SecretError> {
    secret_from_env("COSMOS_KEY")
}

/// The account endpoint and key every program needs, or the error naming the one missing.
pub fn cosmos_account(
    endpoint: Option<Url>,
    key: Option<Secret>,
) -> Result<(Url, Secret), ConfigError> {
    let endpoint = endpoint.ok_or(ConfigError::Missing {
        name: "COSMOS_ENDPOINT",
        hint: "the Cosmos DB account endpoint, e.g. https://myaccount.documents.azure.com:443/",
    })?;
    let key = key.ok_or(ConfigError::Missing {
        name: "COSMOS_KEY",
        hint: "the account key (environment variable, config file, or a file named by COSMOS_KEY_FILE; never a flag)",
    })?;
    Ok((endpoint, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_one_is_named() {
        let url = Url::parse("https://a.documents.azure.com:443/").unwrap();
        let err = cosmos_account(None, Some(Secret::new("k"))).unwrap_err();
        assert!(
            err.to_string().starts_with("COSMOS_ENDPOINT is not set"),
            "{err}"
        );
        let err = cosmos_account(Some(url.clone()), None).unwrap_err();
        assert!(
            err.to_string().starts_with("COSMOS_KEY is not set"),
            "{err}"
        );
        let (endpoint, key) = cosmos_account(Some(url.clone()), Some(Secret::new("k"))).unwrap();
        assert_eq!((endpoint, key.expose()), (url, "k"));
    }
}

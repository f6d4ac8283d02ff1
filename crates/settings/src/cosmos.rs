//! The Cosmos DB account settings, read the same way by every program that talks to the
//! account (the writer, the read API, the alerter): declared once
//! ([`with_cosmos_account!`]) under the same names, flags, variables and file keys;
//! `COSMOS_ENDPOINT`, `COSMOS_AUTH` (the account key, or Entra ID tokens), and the key from
//! `COSMOS_KEY` or the file `COSMOS_KEY_FILE` names, never a flag; layered with the
//! program's own settings ([`layered!`](crate::layered)`(Settings with_cosmos_account {
//! .. })`) and resolved once into a [`CosmosAccount`].

use url::Url;

use crate::{ConfigError, Secret, SecretError, secret_from_env};

/// Declares a program's settings struct (every setting an `Option`, see
/// [`layered!`](crate::layered)) with the Cosmos DB account's settings as its first fields:
/// `cosmos_endpoint` (`COSMOS_ENDPOINT`), `cosmos_auth` (`COSMOS_AUTH`, [`CosmosAuth`]),
/// `cosmos_key` (`COSMOS_KEY`: the environment or the file only, never a flag), `cosmos_database` (`COSMOS_DATABASE`), `cosmos_container`
/// (`COSMOS_CONTAINER`), `cosmos_accept_invalid_certs` (`COSMOS_ACCEPT_INVALID_CERTS`) and
/// `cosmos_allow_insecure` (`COSMOS_ALLOW_INSECURE`, see [`insecure_transport`]).
/// The struct derives clap's `Args` and serde's `Deserialize` as the program says; its
/// `take_cosmos_account` resolves those fields into a [`CosmosAccount`].
///
/// Why a macro and not a struct of the account's settings flattened into each program's:
/// serde's `flatten` does not work with `deny_unknown_fields` (a misspelt key would pass),
/// and the values it buffers lose their place in the file (a wrong value would be reported
/// at line 1); fields declared in the program's own struct keep both.
///
/// ```
/// settings::with_cosmos_account! {
///     /// The settings of a program that reads the account.
///     #[derive(Debug, Default, clap::Args, serde::Deserialize)]
///     #[serde(deny_unknown_fields)]
///     pub struct Settings {
///         /// Its own setting.
///         #[arg(long, env = "RETRIES")]
///         pub retries: Option<u32>,
///     }
/// }
/// settings::layered!(Settings with_cosmos_account { retries });
///
/// let s: Settings = toml::from_str("cosmos_database = \"d\"\nretries = 3").unwrap();
/// assert_eq!((s.cosmos_database.as_deref(), s.retries), (Some("d"), Some(3)));
/// assert!(toml::from_str::<Settings>("cosmos_databse = \"d\"").is_err());
/// ```
#[macro_export]
macro_rules! with_cosmos_account {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($fields:tt)* }) => {
        $(#[$meta])*
        $vis struct $name {
            /// Cosmos DB account endpoint, e.g. https://myaccount.documents.azure.com:443/
            #[arg(long, env = "COSMOS_ENDPOINT")]
            pub cosmos_endpoint: Option<$crate::__private::Url>,
            /// How requests are authorized: key (the account key) or entra (Entra ID
            /// tokens: workload identity, managed identity, AZURE_CREDENTIAL) [default: key]
            #[arg(long, env = "COSMOS_AUTH", value_enum)]
            pub cosmos_auth: Option<$crate::CosmosAuth>,
            /// Cosmos DB account key (environment or file only).
            #[arg(skip)]
            pub cosmos_key: Option<$crate::Secret>,
            /// Database name [default: telemetry]
            #[arg(long, env = "COSMOS_DATABASE")]
            pub cosmos_database: Option<String>,
            /// Container of the position documents [default: positions]
            #[arg(long, env = "COSMOS_CONTAINER")]
            pub cosmos_container: Option<String>,
            /// Accept self-signed certificates (local emulators: an endpoint on this host,
            /// unless COSMOS_ALLOW_INSECURE) [default: false]
            #[arg(long, env = "COSMOS_ACCEPT_INVALID_CERTS")]
            pub cosmos_accept_invalid_certs: Option<bool>,
            /// Allow http:// or unchecked certificates for an endpoint that is not on this host
            /// (a Cosmos emulator elsewhere on a private network) [default: false]
            #[arg(long, env = "COSMOS_ALLOW_INSECURE")]
            pub cosmos_allow_insecure: Option<bool>,
            $($fields)*
        }

        impl $name {
            /// The Cosmos DB account of these settings, taken out of them and resolved
            /// (`settings::CosmosAccount::resolve`).
            $vis fn take_cosmos_account(
                &mut self,
            ) -> Result<$crate::CosmosAccount, $crate::ConfigError> {
                $crate::CosmosAccount::resolve($crate::CosmosGiven {
                    endpoint: self.cosmos_endpoint.take(),
                    auth: self.cosmos_auth.take(),
                    key: self.cosmos_key.take(),
                    database: self.cosmos_database.take(),
                    container: self.cosmos_container.take(),
                    accept_invalid_certs: self.cosmos_accept_invalid_certs.take(),
                    allow_insecure: self.cosmos_allow_insecure.take(),
                })
            }
        }
    };
}

/// The account's settings as given (flags, environment, file), before defaults and checks.
#[derive(Debug, Default)]
pub struct CosmosGiven {
    /// `COSMOS_ENDPOINT`.
    pub endpoint: Option<Url>,
    /// `COSMOS_AUTH`.
    pub auth: Option<CosmosAuth>,
    /// `COSMOS_KEY` (or the file `COSMOS_KEY_FILE` names).
    pub key: Option<Secret>,
    /// `COSMOS_DATABASE`.
    pub database: Option<String>,
    /// `COSMOS_CONTAINER`.
    pub container: Option<String>,
    /// `COSMOS_ACCEPT_INVALID_CERTS`.
    pub accept_invalid_certs: Option<bool>,
    /// `COSMOS_ALLOW_INSECURE`.
    pub allow_insecure: Option<bool>,
}

/// The Cosmos DB account a program reads, resolved: where it is, how requests are
/// authorized, how it is reached, and the positions' database and container.
#[derive(Debug, Clone)]
pub struct CosmosAccount {
    /// Account endpoint.
    pub endpoint: Url,
    /// How requests are authorized: the account key, or Entra ID tokens (`COSMOS_AUTH`).
    pub auth: AccountAuth,
    /// Database (default `telemetry`).
    pub database: String,
    /// Container of the position documents (default `positions`).
    pub container: String,
    /// Accept self-signed certificates (emulators only).
    pub accept_invalid_certs: bool,
    /// What is unprotected about a remote endpoint that `COSMOS_ALLOW_INSECURE` let
    /// through, to be logged at start.
    pub insecure: Option<String>,
}

impl CosmosAccount {
    /// Applies the defaults and checks the account's settings: the endpoint and how to
    /// authorize ([`cosmos_account`]), how the account is reached ([`insecure_transport`]).
    pub fn resolve(given: CosmosGiven) -> Result<CosmosAccount, ConfigError> {
        let (endpoint, auth) = cosmos_account(given.endpoint, given.auth, given.key)?;
        let accept_invalid_certs = given.accept_invalid_certs.unwrap_or(false);
        let insecure = insecure_transport(
            &endpoint,
            accept_invalid_certs,
            given.allow_insecure.unwrap_or(false),
        )?;
        Ok(CosmosAccount {
            endpoint,
            auth,
            database: given.database.unwrap_or_else(|| "telemetry".into()),
            container: given.container.unwrap_or_else(|| "positions".into()),
            accept_invalid_certs,
            insecure,
        })
    }
}

/// How a program proves itself to the account (`COSMOS_AUTH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CosmosAuth {
    /// The account key signs every request (`COSMOS_KEY`).
    #[default]
    Key,
    /// Entra ID tokens: no key anywhere; the identity needs a Cosmos DB data-plane role
    /// assignment, and the database and container must exist.
    Entra,
}

/// How a program authorizes its requests, resolved.
#[derive(Debug, Clone)]
pub enum AccountAuth {
    /// With this account key.
    Key(Secret),
    /// With Entra ID tokens.
    Entra,
}

/// The account key from `COSMOS_KEY`, or the file `COSMOS_KEY_FILE` names (`-`: standard
/// input).
pub fn cosmos_key_from_env() -> Result<Option<Secret>, SecretError> {
    secret_from_env("COSMOS_KEY")
}

/// The account endpoint and how to authorize, or the error naming the setting missing or
/// in the way: a key with `COSMOS_AUTH=key` (the default), none with `entra`.
pub fn cosmos_account(
    endpoint: Option<Url>,
    auth: Option<CosmosAuth>,
    key: Option<Secret>,
) -> Result<(Url, AccountAuth), ConfigError> {
    let endpoint = endpoint.ok_or(ConfigError::Missing {
        name: "COSMOS_ENDPOINT",
        hint: "the Cosmos DB account endpoint, e.g. https://myaccount.documents.azure.com:443/",
    })?;
    let auth = match (auth.unwrap_or_default(), key) {
        (CosmosAuth::Key, Some(key)) => AccountAuth::Key(key),
        (CosmosAuth::Key, None) => {
            return Err(ConfigError::Missing {
                name: "COSMOS_KEY",
                hint: "the account key (environment variable, config file, or a file named by COSMOS_KEY_FILE; never a flag), or COSMOS_AUTH=entra for Entra ID tokens",
            });
        }
        (CosmosAuth::Entra, None) => AccountAuth::Entra,
        (CosmosAuth::Entra, Some(_)) => {
            return Err(ConfigError::Invalid {
                name: "COSMOS_AUTH",
                message: "entra takes no account key, but COSMOS_KEY (or COSMOS_KEY_FILE) is set: remove the key, or write COSMOS_AUTH=key to use it".into(),
            });
        }
    };
    Ok((endpoint, auth))
}

/// Checks how the account is reached: a plain `http://` endpoint or unchecked certificates
/// (`COSMOS_ACCEPT_INVALID_CERTS`) are for an endpoint on this host (`localhost`,
/// `127.0.0.0/8`, `::1`); for any other, only with `COSMOS_ALLOW_INSECURE`, and then the
/// warning to log is returned.
pub fn insecure_transport(
    endpoint: &Url,
    accept_invalid_certs: bool,
    allow_insecure: bool,
) -> Result<Option<String>, ConfigError> {
    let plain_http = endpoint.scheme() == "http";
    if !(plain_http || accept_invalid_certs) || is_loopback(endpoint) {
        return Ok(None);
    }
    let what = if plain_http {
        "a plain http:// endpoint"
    } else {
        "COSMOS_ACCEPT_INVALID_CERTS"
    };
    if !allow_insecure {
        return Err(ConfigError::Invalid {
            name: "COSMOS_ENDPOINT",
            message: format!(
                "{what} is allowed only for an endpoint on this host (localhost, 127.0.0.1, ::1): the account key and every document would cross the network unprotected. Use https:// with a trusted certificate, or set COSMOS_ALLOW_INSECURE=true for an emulator on a private network"
            ),
        });
    }
    Ok(Some(format!(
        "{what} to {} (COSMOS_ALLOW_INSECURE): the traffic to Cosmos DB is not protected",
        endpoint.host_str().unwrap_or_default()
    )))
}

/// Whether `url` names this host (`localhost`, `127.0.0.0/8`, `::1`).
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::with_cosmos_account! {
        #[derive(Debug, Default, clap::Args, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Settings {
            #[arg(long)]
            retries: Option<u32>,
        }
    }
    crate::layered!(Settings with_cosmos_account { retries });

    #[test]
    fn an_unprotected_endpoint_must_be_on_this_host_or_allowed() {
        let url = |u: &str| Url::parse(u).unwrap();
        for local in [
            "http://localhost:8081/",
            "https://127.0.0.2/",
            "http://[::1]:1/",
        ] {
            assert_eq!(insecure_transport(&url(local), true, false).unwrap(), None);
        }
        let remote = url("http://emulator.internal:8081/");
        let err = insecure_transport(&remote, false, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("COSMOS_ALLOW_INSECURE") && err.contains("http://"),
            "{err}"
        );
        let warning = insecure_transport(&remote, false, true).unwrap().unwrap();
        assert!(warning.contains("emulator.internal"), "{warning}");
        let tls = url("https://account.documents.azure.com/");
        assert_eq!(insecure_transport(&tls, false, false).unwrap(), None);
        let err = insecure_transport(&tls, true, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("COSMOS_ACCEPT_INVALID_CERTS"), "{err}");
    }

    #[test]
    fn file_errors_name_the_account_key_and_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("program.toml");
        std::fs::write(&file, "retries = 3\n\ncosmos_endpoint = \"no url\"\n").unwrap();
        let err = crate::read_toml::<Settings>(&file).unwrap_err().to_string();
        assert!(err.contains("line 3, key `cosmos_endpoint`"), "{err}");
        assert!(!err.contains("no url"), "{err}");
        std::fs::write(&file, "retries = 3\ncosmos_databse = \"x\"\n").unwrap();
        let err = crate::read_toml::<Settings>(&file).unwrap_err().to_string();
        assert!(err.contains("line 2, key `cosmos_databse`"), "{err}");
        std::fs::write(&file, "cosmos_database = \"d\"\nretries = 3\n").unwrap();
        let s = crate::read_toml::<Settings>(&file).unwrap();
        assert_eq!(
            (s.cosmos_database.as_deref(), s.retries),
            (Some("d"), Some(3))
        );
        assert!(s.cosmos_endpoint.is_none() && s.cosmos_key.is_none());
        assert!(s.cosmos_container.is_none() && s.cosmos_accept_invalid_certs.is_none());
    }

    #[test]
    fn the_missing_one_is_named() {
        let url = Url::parse("https://a.documents.azure.com:443/").unwrap();
        let key = || Some(Secret::new("k"));
        let err = cosmos_account(None, None, key()).unwrap_err();
        assert!(
            err.to_string().starts_with("COSMOS_ENDPOINT is not set"),
            "{err}"
        );
        let err = cosmos_account(Some(url.clone()), None, None).unwrap_err();
        assert!(
            err.to_string().starts_with("COSMOS_KEY is not set"),
            "{err}"
        );
        let (endpoint, auth) = cosmos_account(Some(url.clone()), None, key()).unwrap();
        assert!(matches!(auth, AccountAuth::Key(k) if k.expose() == "k"));
        assert_eq!(endpoint, url);
        let (_, auth) = cosmos_account(Some(url.clone()), Some(CosmosAuth::Entra), None).unwrap();
        assert!(matches!(auth, AccountAuth::Entra));
        let err = cosmos_account(Some(url.clone()), Some(CosmosAuth::Entra), key()).unwrap_err();
        assert!(err.to_string().contains("remove the key"), "{err}");
    }

    #[test]
    fn the_account_layers_and_resolves_with_its_defaults() {
        use crate::Layered as _;
        let given = Settings {
            cosmos_endpoint: Some(Url::parse("https://a.documents.azure.com/").unwrap()),
            cosmos_key: Some(Secret::new("k")),
            ..Settings::default()
        };
        let file = Settings {
            cosmos_endpoint: Some(Url::parse("https://other.documents.azure.com/").unwrap()),
            cosmos_container: Some("c".into()),
            retries: Some(3),
            ..Settings::default()
        };
        let mut settings = given.or(file);
        let account = settings.take_cosmos_account().unwrap();
        assert_eq!(account.endpoint.host_str(), Some("a.documents.azure.com"));
        assert!(matches!(account.auth, AccountAuth::Key(k) if k.expose() == "k"));
        assert_eq!(
            (account.database.as_str(), account.container.as_str()),
            ("telemetry", "c")
        );
        assert!(!account.accept_invalid_certs && account.insecure.is_none());
        assert!(settings.cosmos_endpoint.is_none() && settings.cosmos_container.is_none());
        assert_eq!(settings.retries, Some(3));
        let mut remote_http = Settings {
            cosmos_endpoint: Some(Url::parse("http://emulator.internal:8081/").unwrap()),
            cosmos_key: Some(Secret::new("k")),
            cosmos_allow_insecure: Some(true),
            ..Settings::default()
        };
        let account = remote_http.take_cosmos_account().unwrap();
        assert!(account.insecure.unwrap().contains("emulator.internal"));
    }
}

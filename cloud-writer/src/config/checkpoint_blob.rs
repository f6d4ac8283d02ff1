//! The settings of the Event Hubs checkpoint store: which store (`EVENTHUBS_CHECKPOINT_STORE`),
//! and for Blob Storage the account (a connection string with its key, or an account URL
//! reached with Entra ID) and the container, checked at start.

use serde::Deserialize;
use settings::{ConfigError, Secret};
use url::Url;

/// Where the Event Hubs checkpoints and ownerships are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointStoreKind {
    /// Azure Blob Storage, in the layout every Event Hubs SDK (and KEDA) reads.
    Blob,
    /// A Cosmos DB container of this project's layout.
    Cosmos,
}

impl CheckpointStoreKind {
    /// Its name, as the settings write it.
    pub fn name(self) -> &'static str {
        match self {
            CheckpointStoreKind::Blob => "blob",
            CheckpointStoreKind::Cosmos => "cosmos",
        }
    }
}

/// How requests to the storage account are authorized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobAuth {
    /// Shared Key, with the account key of a connection string.
    SharedKey {
        /// Account name.
        account: String,
        /// Account key, base64.
        key: Secret,
    },
    /// Entra ID bearer tokens (scope `https://storage.azure.com/.default`).
    Entra,
}

/// The Blob Storage checkpoint store's account and container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobCheckpoints {
    /// The account's Blob service, e.g. `https://{account}.blob.core.windows.net/`.
    pub endpoint: Url,
    /// How requests are authorized.
    pub auth: BlobAuth,
    /// Container of the checkpoint and ownership blobs.
    pub container: String,
}

impl BlobCheckpoints {
    /// Azurite's development account over a connection string's `BlobEndpoint`, or with
    /// `UseDevelopmentStorage=true` on its default port.
    pub const DEVELOPMENT_ACCOUNT: &str = "devstoreaccount1";

    /// Whether the container may be created when missing: with a key only (an Entra
    /// identity with the data role cannot create containers).
    pub fn may_create_container(&self) -> bool {
        matches!(self.auth, BlobAuth::SharedKey { .. })
    }

    /// The store the settings choose: `None` for Cosmos DB. Refuses a blob store without
    /// account or container, both kinds of account, and blob settings with `cosmos`.
    pub fn resolve(
        kind: Option<CheckpointStoreKind>,
        connection_string: Option<Secret>,
        account_url: Option<Url>,
        container: Option<String>,
    ) -> Result<Option<BlobCheckpoints>, ConfigError> {
        let account_given = connection_string.is_some() || account_url.is_some();
        let kind = kind.unwrap_or(if account_given {
            CheckpointStoreKind::Blob
        } else {
            CheckpointStoreKind::Cosmos
        });
        if kind == CheckpointStoreKind::Cosmos {
            if account_given || container.is_some() {
                return Err(ConfigError::Invalid {
                    name: "EVENTHUBS_CHECKPOINT_STORE",
                    message: "is cosmos, but CHECKPOINT_BLOB_* settings are given: set EVENTHUBS_CHECKPOINT_STORE=blob to keep the checkpoints in Blob Storage, or unset CHECKPOINT_BLOB_CONNECTION_STRING, CHECKPOINT_BLOB_ACCOUNT_URL and CHECKPOINT_BLOB_CONTAINER".into(),
                });
            }
            return Ok(None);
        }
        let (endpoint, auth) = match (connection_string, account_url) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid {
                    name: "CHECKPOINT_BLOB_ACCOUNT_URL",
                    message: "and CHECKPOINT_BLOB_CONNECTION_STRING are both set: keep the connection string (Shared Key) or the account URL (Entra ID), not both".into(),
                });
            }
            (Some(connection), None) => {
                parse_connection_string(connection.expose()).map_err(|message| {
                    ConfigError::Invalid {
                        name: "CHECKPOINT_BLOB_CONNECTION_STRING",
                        message,
                    }
                })?
            }
            (None, Some(url)) => {
                if !matches!(url.scheme(), "https" | "http") || url.query().is_some() {
                    return Err(ConfigError::Invalid {
                        name: "CHECKPOINT_BLOB_ACCOUNT_URL",
                        message: "must be the account's Blob service URL without query (no SAS), e.g. https://myaccount.blob.core.windows.net/".into(),
                    });
                }
                (url, BlobAuth::Entra)
            }
            (None, None) => {
                return Err(ConfigError::Missing {
                    name: "CHECKPOINT_BLOB_CONNECTION_STRING",
                    hint: "EVENTHUBS_CHECKPOINT_STORE=blob needs a storage account: set CHECKPOINT_BLOB_CONNECTION_STRING (or CHECKPOINT_BLOB_CONNECTION_STRING_FILE) to its connection string, or CHECKPOINT_BLOB_ACCOUNT_URL (https://myaccount.blob.core.windows.net/) to sign in with Entra ID",
                });
            }
        };
        let container = container.ok_or(ConfigError::Missing {
            name: "CHECKPOINT_BLOB_CONTAINER",
            hint: "the blob checkpoint store needs the container of its blobs, e.g. CHECKPOINT_BLOB_CONTAINER=checkpoints",
        })?;
        if !valid_container_name(&container) {
            return Err(ConfigError::Invalid {
                name: "CHECKPOINT_BLOB_CONTAINER",
                message: format!(
                    "'{container}' is not a container name: 3 to 63 lower-case letters, digits and single hyphens, starting and ending with a letter or digit, e.g. checkpoints"
                ),
            });
        }
        Ok(Some(BlobCheckpoints {
            endpoint,
            auth,
            container,
        }))
    }
}

/// Azure's rule for container names.
fn valid_container_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// The Blob endpoint and Shared Key of an Azure Storage connection string
/// (`DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...;EndpointSuffix=...`,
/// or with `BlobEndpoint=...`; `UseDevelopmentStorage=true` is Azurite's account).
pub fn parse_connection_string(text: &str) -> Result<(Url, BlobAuth), String> {
    let mut fields = std::collections::HashMap::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| "is not a connection string of name=value pairs separated by ';' (copy it from the storage account's Access keys)".to_owned())?;
        fields.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    if fields.get("usedevelopmentstorage").map(String::as_str) == Some("true") {
        return Ok((
            Url::parse("http://127.0.0.1:10000/devstoreaccount1").expect("a URL"),
            BlobAuth::SharedKey {
                account: BlobCheckpoints::DEVELOPMENT_ACCOUNT.into(),
                key: Secret::new(AZURITE_KEY),
            },
        ));
    }
    let (Some(account), Some(key)) = (fields.get("accountname"), fields.get("accountkey")) else {
        return Err("needs AccountName and AccountKey (a SAS-only connection string is not supported: use the account's key, or CHECKPOINT_BLOB_ACCOUNT_URL with Entra ID)".into());
    };
    use base64::Engine as _;
    if base64::engine::general_purpose::STANDARD
        .decode(key)
        .is_err()
    {
        return Err(
            "its AccountKey is not base64: copy the key from the storage account's Access keys"
                .into(),
        );
    }
    let endpoint = match fields.get("blobendpoint") {
        Some(endpoint) => endpoint.clone(),
        None => {
            let protocol = fields
                .get("defaultendpointsprotocol")
                .map_or("https", String::as_str);
            let suffix = fields
                .get("endpointsuffix")
                .map_or("core.windows.net", String::as_str);
            format!("{protocol}://{account}.blob.{suffix}/")
        }
    };
    let endpoint = Url::parse(&endpoint)
        .map_err(|e| format!("its blob endpoint '{endpoint}' is not a URL ({e})"))?;
    Ok((
        endpoint,
        BlobAuth::SharedKey {
            account: account.clone(),
            key: Secret::new(key),
        },
    ))
}

/// Azurite's documented development account key (public, for local use only).
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

#[cfg(test)]
mod tests {
    use super::*;

    const AZURITE: &str = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;";

    fn resolve(
        kind: Option<CheckpointStoreKind>,
        connection: Option<&str>,
        url: Option<&str>,
        container: Option<&str>,
    ) -> Result<Option<BlobCheckpoints>, String> {
        BlobCheckpoints::resolve(
            kind,
            connection.map(Secret::new),
            url.map(|u| u.parse().unwrap()),
            container.map(str::to_owned),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn the_store_defaults_to_blob_when_an_account_is_given() {
        assert_eq!(resolve(None, None, None, None), Ok(None));
        let blob = resolve(None, Some(AZURITE), None, Some("checkpoints"))
            .unwrap()
            .unwrap();
        assert_eq!(
            blob.endpoint.as_str(),
            "http://127.0.0.1:10000/devstoreaccount1"
        );
        assert!(blob.may_create_container());
        let entra = resolve(
            None,
            None,
            Some("https://acct.blob.core.windows.net/"),
            Some("checkpoints"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(entra.auth, BlobAuth::Entra);
        assert!(!entra.may_create_container());
    }

    #[test]
    fn wrong_combinations_say_what_to_set() {
        let cases = [
            (
                Some(CheckpointStoreKind::Blob),
                None,
                None,
                Some("c1c"),
                "CHECKPOINT_BLOB_ACCOUNT_URL",
            ),
            (
                None,
                Some(AZURITE),
                None,
                None,
                "CHECKPOINT_BLOB_CONTAINER=checkpoints",
            ),
            (
                None,
                Some(AZURITE),
                Some("https://acct.blob.core.windows.net/"),
                Some("checkpoints"),
                "not both",
            ),
            (
                Some(CheckpointStoreKind::Cosmos),
                Some(AZURITE),
                None,
                Some("checkpoints"),
                "EVENTHUBS_CHECKPOINT_STORE=blob",
            ),
            (
                None,
                Some(AZURITE),
                None,
                Some("Check_Points"),
                "lower-case",
            ),
            (
                None,
                Some("AccountName=a;AccountKey=not base64!"),
                None,
                Some("checkpoints"),
                "not base64",
            ),
            (
                None,
                Some("BlobEndpoint=https://a.blob.core.windows.net/;SharedAccessSignature=sv=x"),
                None,
                Some("checkpoints"),
                "AccountKey",
            ),
        ];
        for (kind, connection, url, container, hint) in cases {
            let err = resolve(kind, connection, url, container).unwrap_err();
            assert!(err.contains(hint), "{hint}: {err}");
            assert!(!err.contains("Eby8vdM02"), "the key never appears: {err}");
        }
    }

    /// The connection string forms of the Azure Storage docs ("Configure Azure Storage
    /// connection strings"): account and suffix, and the development shortcut.
    #[test]
    fn connection_strings_name_the_blob_endpoint() {
        let (endpoint, auth) = parse_connection_string(
            "DefaultEndpointsProtocol=https;AccountName=myaccount;AccountKey=bXlrZXk=;EndpointSuffix=core.windows.net",
        )
        .unwrap();
        assert_eq!(
            endpoint.as_str(),
            "https://myaccount.blob.core.windows.net/"
        );
        assert_eq!(
            auth,
            BlobAuth::SharedKey {
                account: "myaccount".into(),
                key: Secret::new("bXlrZXk=")
            }
        );
        let (endpoint, _) = parse_connection_string("UseDevelopmentStorage=true").unwrap();
        assert_eq!(endpoint.as_str(), "http://127.0.0.1:10000/devstoreaccount1");
    }
}

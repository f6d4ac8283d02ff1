//! The alerter's settings: flags, environment variables and a TOML file, layered the way of
//! every program ([`settings::layer`]) and resolved into one typed [`AlerterConfig`], with
//! the Cosmos DB account read as the other programs read it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use cosmos::FeedPosition;
use serde::Deserialize;
use settings::{
    ConfigError, CosmosAccount, DurationSetting, LogFormat, Secret, cosmos_key_from_env,
    secret_from_env,
};
use url::Url;

use crate::metrics;

/// Where a range without a continuation starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeedStart {
    /// Only changes made from the lease's first read on.
    #[default]
    Now,
    /// Every document in the container (each drone's latest position).
    Beginning,
}

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

settings::with_cosmos_account! {
    /// Every setting as given by flags, environment or file; `None` when not given.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Settings {
        /// Container of the geofences, in COSMOS_DATABASE, as fleet-api writes them
        /// [default: geofences]
        #[arg(long, env = "COSMOS_GEOFENCE_CONTAINER")]
        pub cosmos_geofence_container: Option<String>,
        /// Container of the leases and the drones' judging state, in COSMOS_DATABASE,
        /// partition key /id; created when missing [default: alert-leases]
        #[arg(long, env = "ALERT_LEASE_CONTAINER")]
        pub alert_lease_container: Option<String>,
        /// The rules: a TOML file, or JSON when its name ends in .json; read again when it
        /// changes
        #[arg(long, env = "ALERT_RULES_FILE")]
        pub alert_rules_file: Option<PathBuf>,
        /// Webhooks alerts are posted to, comma-separated
        #[arg(long, env = "ALERT_WEBHOOK_URLS")]
        pub alert_webhook_urls: Option<String>,
        /// Key of the webhooks' HMAC signature (environment or file: ALERT_WEBHOOK_SECRET,
        /// ALERT_WEBHOOK_SECRET_FILE)
        #[arg(skip)]
        pub alert_webhook_secret: Option<Secret>,
        /// Event Grid topic endpoint (https://{topic}.{region}-1.eventgrid.azure.net/api/events)
        #[arg(long, env = "ALERT_EVENTGRID_ENDPOINT")]
        pub alert_eventgrid_endpoint: Option<Url>,
        /// How Event Grid requests are authorized: key or entra [default: key]
        #[arg(long, env = "ALERT_EVENTGRID_AUTH", value_enum)]
        pub alert_eventgrid_auth: Option<GridAuth>,
        /// The topic's access key (environment or file: ALERT_EVENTGRID_KEY,
        /// ALERT_EVENTGRID_KEY_FILE)
        #[arg(skip)]
        pub alert_eventgrid_key: Option<Secret>,
        /// How long an alert is retried on 408, 429, 5xx and transport failures before it is
        /// dead-lettered [default: 10m]
        #[arg(long, env = "ALERT_RETRY_FOR")]
        pub alert_retry_for: Option<DurationSetting>,
        /// File the alerts no destination took are appended to, JSON lines
        /// [default: alerts-dead-letter.jsonl]
        #[arg(long, env = "ALERT_DEAD_LETTER_FILE")]
        pub alert_dead_letter_file: Option<PathBuf>,
        /// The CloudEvents source of the alerts [default: /drone-telemetry/alerter]
        #[arg(long, env = "ALERT_SOURCE")]
        pub alert_source: Option<String>,
        /// This instance's name in the leases, unique among replicas [default: the host
        /// name and process id]
        #[arg(long, env = "ALERT_INSTANCE")]
        pub alert_instance: Option<String>,
        /// How often leases are renewed and balanced [default: 10s]
        #[arg(long, env = "ALERT_LEASE_INTERVAL")]
        pub alert_lease_interval: Option<DurationSetting>,
        /// How long a lease holds without renewal before another instance takes it over;
        /// at least twice ALERT_LEASE_INTERVAL [default: 60s]
        #[arg(long, env = "ALERT_LEASE_EXPIRY")]
        pub alert_lease_expiry: Option<DurationSetting>,
        /// How often a quiet range's feed is asked again [default: 1s]
        #[arg(long, env = "ALERT_FEED_POLL")]
        pub alert_feed_poll: Option<DurationSetting>,
        /// Where a range without a continuation starts: now or beginning [default: now]
        #[arg(long, env = "ALERT_FEED_START", value_enum)]
        pub alert_feed_start: Option<FeedStart>,
        /// How often the drones are searched for silent ones [default: 10s]
        #[arg(long, env = "ALERT_SILENT_SWEEP")]
        pub alert_silent_sweep: Option<DurationSetting>,
        /// Address /metrics listens on [default: 127.0.0.1:9466]
        #[arg(long, env = "ALERT_METRICS_ADDR")]
        pub alert_metrics_addr: Option<SocketAddr>,
        /// Log format: text or json [default: text]
        #[arg(long, env = "LOG_FORMAT")]
        pub log_format: Option<LogFormat>,
    }
}

settings::layered!(Settings with_cosmos_account {
    cosmos_geofence_container,
    alert_lease_container,
    alert_rules_file,
    alert_webhook_urls,
    alert_webhook_secret,
    alert_eventgrid_endpoint,
    alert_eventgrid_auth,
    alert_eventgrid_key,
    alert_retry_for,
    alert_dead_letter_file,
    alert_source,
    alert_instance,
    alert_lease_interval,
    alert_lease_expiry,
    alert_feed_poll,
    alert_feed_start,
    alert_silent_sweep,
    alert_metrics_addr,
    log_format,
});

/// The Event Grid topic, resolved.
#[derive(Debug, Clone)]
pub enum GridConfig {
    /// With its access key.
    Key(Url, Secret),
    /// With Entra ID tokens.
    Entra(Url),
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct AlerterConfig {
    /// The Cosmos DB account, its database and the positions container.
    pub cosmos: CosmosAccount,
    /// Geofences container.
    pub geofence_container: String,
    /// Lease container.
    pub lease_container: String,
    /// The rules file.
    pub rules_file: PathBuf,
    /// Webhooks.
    pub webhooks: Vec<Url>,
    /// The webhooks' HMAC key.
    pub webhook_secret: Option<Secret>,
    /// The Event Grid topic.
    pub event_grid: Option<GridConfig>,
    /// How long an alert is retried.
    pub retry_for: Duration,
    /// The dead-letter file.
    pub dead_letter_file: PathBuf,
    /// The CloudEvents source.
    pub source: String,
    /// This instance's name.
    pub instance: String,
    /// Lease renewal and balancing interval.
    pub lease_interval: Duration,
    /// Lease expiry.
    pub lease_expiry: Duration,
    /// Feed poll interval.
    pub poll: Duration,
    /// Where a new range starts.
    pub start: FeedPosition,
    /// Silent-drone sweep interval.
    pub silent_sweep: Duration,
    /// Where /metrics listens.
    pub metrics_addr: SocketAddr,
    /// Log format.
    pub log_format: LogFormat,
}

impl Settings {
    /// The secrets that have no flag, from the environment or the files their `_FILE`
    /// variables name.
    pub fn secrets_from_env() -> Result<Settings, ConfigError> {
        Ok(Settings {
            cosmos_key: cosmos_key_from_env()?,
            alert_webhook_secret: secret_from_env("ALERT_WEBHOOK_SECRET")?,
            alert_eventgrid_key: secret_from_env("ALERT_EVENTGRID_KEY")?,
            ..Settings::default()
        })
    }

    /// Resolves into a typed configuration, applying defaults and checking values.
    pub fn resolve(mut self) -> Result<AlerterConfig, ConfigError> {
        let cosmos = self.take_cosmos_account()?;
        let rules_file = self.alert_rules_file.ok_or(ConfigError::Missing {
            name: "ALERT_RULES_FILE",
            hint: "the rules file (TOML, or JSON ending in .json): see the alerter's README",
        })?;
        let webhooks = webhooks(self.alert_webhook_urls.as_deref())?;
        let event_grid = match (
            self.alert_eventgrid_endpoint,
            self.alert_eventgrid_auth.unwrap_or_default(),
            self.alert_eventgrid_key,
        ) {
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
        };
        if webhooks.is_empty() && event_grid.is_none() {
            return Err(ConfigError::Missing {
                name: "ALERT_WEBHOOK_URLS",
                hint: "where alerts go: webhooks (comma-separated URLs) and/or ALERT_EVENTGRID_ENDPOINT",
            });
        }
        let lease_interval = duration(self.alert_lease_interval, 10_000);
        let lease_expiry = duration(self.alert_lease_expiry, 60_000);
        if lease_expiry < lease_interval * 2 {
            return Err(ConfigError::Invalid {
                name: "ALERT_LEASE_EXPIRY",
                message: format!(
                    "must be at least twice ALERT_LEASE_INTERVAL ({lease_interval:?}), or a live owner's lease expires between two renewals: write {:?} or more",
                    lease_interval * 2
                ),
            });
        }
        let poll = duration(self.alert_feed_poll, 1_000);
        if poll < Duration::from_millis(50) {
            return Err(ConfigError::Invalid {
                name: "ALERT_FEED_POLL",
                message: "must be at least 50ms".into(),
            });
        }
        let instance = self.alert_instance.unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "alerter".into());
            format!("{host}-{}", std::process::id())
        });
        Ok(AlerterConfig {
            cosmos,
            geofence_container: self
                .cosmos_geofence_container
                .unwrap_or_else(|| "geofences".into()),
            lease_container: self
                .alert_lease_container
                .unwrap_or_else(|| "alert-leases".into()),
            rules_file,
            webhooks,
            webhook_secret: self.alert_webhook_secret,
            event_grid,
            retry_for: duration(self.alert_retry_for, 600_000),
            dead_letter_file: self
                .alert_dead_letter_file
                .unwrap_or_else(|| "alerts-dead-letter.jsonl".into()),
            source: self
                .alert_source
                .unwrap_or_else(|| "/drone-telemetry/alerter".into()),
            instance,
            lease_interval,
            lease_expiry,
            poll,
            start: match self.alert_feed_start.unwrap_or_default() {
                FeedStart::Now => FeedPosition::Now,
                FeedStart::Beginning => FeedPosition::Beginning,
            },
            silent_sweep: duration(self.alert_silent_sweep, 10_000),
            metrics_addr: self.alert_metrics_addr.unwrap_or(metrics::DEFAULT_ADDR),
            log_format: self.log_format.unwrap_or_default(),
        })
    }
}

fn duration(given: Option<DurationSetting>, default_ms: u64) -> Duration {
    given.map_or(Duration::from_millis(default_ms), |d| d.0)
}

/// The webhook URLs of a comma-separated list, each http(s).
fn webhooks(text: Option<&str>) -> Result<Vec<Url>, ConfigError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn given() -> Settings {
        Settings {
            cosmos_endpoint: Some(Url::parse("http://localhost:8081/").unwrap()),
            cosmos_key: Some(Secret::new("a2V5")),
            alert_rules_file: Some("rules.toml".into()),
            alert_webhook_urls: Some("http://127.0.0.1:1/hook".into()),
            ..Settings::default()
        }
    }

    #[test]
    fn defaults_and_what_a_wrong_setting_says() {
        let config = given().resolve().unwrap();
        assert_eq!(config.lease_container, "alert-leases");
        assert_eq!(config.lease_expiry, Duration::from_secs(60));
        assert_eq!(config.start, FeedPosition::Now);
        let err = |s: Settings| s.resolve().unwrap_err().to_string();
        assert!(
            err(Settings {
                alert_rules_file: None,
                ..given()
            })
            .contains("ALERT_RULES_FILE")
        );
        assert!(
            err(Settings {
                alert_webhook_urls: Some("ftp://x".into()),
                ..given()
            })
            .contains("http(s)")
        );
        assert!(
            err(Settings {
                alert_webhook_urls: None,
                ..given()
            })
            .contains("ALERT_EVENTGRID_ENDPOINT")
        );
        let short = Settings {
            alert_lease_interval: Some("10s".parse().unwrap()),
            alert_lease_expiry: Some("15s".parse().unwrap()),
            ..given()
        };
        assert!(err(short).contains("twice"));
        let keyless = Settings {
            alert_eventgrid_endpoint: Some(
                Url::parse("https://t.westus2-1.eventgrid.azure.net/api/events").unwrap(),
            ),
            ..given()
        };
        assert!(err(keyless).contains("ALERT_EVENTGRID_KEY"));
    }
}

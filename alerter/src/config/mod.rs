//! The alerter's settings: flags, environment variables and a TOML file, layered the way of
//! every program ([`settings::layer`]) and resolved into one typed [`AlerterConfig`], with
//! the Cosmos DB account read as every program reads it ([`settings::CosmosAccount`]).
//!
//! This file declares every setting (one struct, so that the file denies unknown keys) and
//! resolves them; each group's values and checks are in a file of its own:
//! - `delivery`: where alerts go (webhooks, the Event Grid topic);
//! - `leases`: the leases and the change feed (timing, where a range starts, the
//!   instance's name).

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

mod delivery;
mod leases;
#[cfg(test)]
mod tests;

pub use delivery::{GridAuth, GridConfig};
pub use leases::FeedStart;

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
        let webhooks = delivery::webhooks(self.alert_webhook_urls.as_deref())?;
        let event_grid = delivery::event_grid(
            self.alert_eventgrid_endpoint,
            self.alert_eventgrid_auth,
            self.alert_eventgrid_key,
        )?;
        if webhooks.is_empty() && event_grid.is_none() {
            return Err(ConfigError::Missing {
                name: "ALERT_WEBHOOK_URLS",
                hint: "where alerts go: webhooks (comma-separated URLs) and/or ALERT_EVENTGRID_ENDPOINT",
            });
        }
        let (lease_interval, lease_expiry) =
            leases::lease_timing(self.alert_lease_interval, self.alert_lease_expiry)?;
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
            retry_for: self
                .alert_retry_for
                .map_or(Duration::from_secs(600), |d| d.0),
            dead_letter_file: self
                .alert_dead_letter_file
                .unwrap_or_else(|| "alerts-dead-letter.jsonl".into()),
            source: self
                .alert_source
                .unwrap_or_else(|| "/drone-telemetry/alerter".into()),
            instance: leases::instance(self.alert_instance),
            lease_interval,
            lease_expiry,
            poll: leases::feed_poll(self.alert_feed_poll)?,
            start: self.alert_feed_start.unwrap_or_default().into(),
            silent_sweep: self
                .alert_silent_sweep
                .map_or(Duration::from_secs(10), |d| d.0),
            metrics_addr: self.alert_metrics_addr.unwrap_or(metrics::DEFAULT_ADDR),
            log_format: self.log_format.unwrap_or_default(),
        })
    }
}

//! The cloud writer's field metrics as read from its Prometheus text, for a writer in
//! another process: positions received and documents written, drops by reason, throttled
//! requests and lateness. (The demo's writers run in its own process and are read through
//! `cloud_writer::Snapshot` instead.)
//!
//! Owns the metric names this tool relies on ([`names`]), the figures of an interval
//! between two scrapes ([`WriterFigures::between`]) and the HTTP scraper the load
//! generator uses (`--writer-metrics http://host:port/metrics`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cloud_writer::{DropReason, UnknownDropReason};
use serde::Serialize;

use crate::prom::{self, Scrape};

/// The cloud writer's metric names.
pub mod names {
    /// Counter: messages taken from the source.
    pub const RECEIVED: &str = "cloud_writer_messages_received_total";
    /// Counter with label `kind`: documents written (final success).
    pub const WRITTEN: &str = "cloud_writer_documents_written_total";
    /// Counter with label `reason`: messages not written.
    pub const DROPPED: &str = "cloud_writer_messages_dropped_total";
    /// Counter with label `range`: requests throttled by Cosmos DB (429).
    pub const THROTTLED: &str = "cloud_writer_cosmos_throttled_total";
    /// Counter with labels `range` and `kind` (`latest`, `agent`, `history`): request units
    /// consumed (the heat map; read summed over `kind`).
    pub const REQUEST_UNITS: &str = "cloud_writer_cosmos_request_units_total";
    /// Histogram, seconds: from the device time to the write's outcome. (With an MQTT
    /// source the "enqueued" time is the writer's own receipt, so only the device time
    /// shows how far behind the writer is.)
    pub const LATENESS: &str = "cloud_writer_lateness_device_to_written_seconds";
}

/// What the writer did between two scrapes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WriterFigures {
    /// Positions received.
    pub received: u64,
    /// Documents written.
    pub written: u64,
    /// Positions dropped, by reason.
    pub dropped: BTreeMap<DropReason, u64>,
    /// Throttled requests (429).
    pub throttled: u64,
    /// Request units consumed per partition key range (the heat map).
    pub ru_per_range: BTreeMap<String, f64>,
    /// Lateness p50 in seconds.
    pub lateness_p50: Option<f64>,
    /// Lateness p99 in seconds.
    pub lateness_p99: Option<f64>,
}

impl WriterFigures {
    /// The figures of the interval from `before` to `after`; an error when `after` names
    /// a drop reason this build does not know (a writer of another version).
    pub fn between(before: &Scrape, after: &Scrape) -> Result<WriterFigures, UnknownDropReason> {
        let delta = |name: &str| (after.sum(name, &[]) - before.sum(name, &[])).max(0.0) as u64;
        let old_drops = before.by_label(names::DROPPED, "reason");
        let dropped = after
            .by_label(names::DROPPED, "reason")
            .into_iter()
            .map(|(label, n)| {
                let old = old_drops.get(&label).copied().unwrap_or(0.0);
                Ok((label.parse()?, (n - old).max(0.0) as u64))
            })
            .collect::<Result<_, _>>()?;
        let old_ru = before.by_label(names::REQUEST_UNITS, "range");
        let ru_per_range = after
            .by_label(names::REQUEST_UNITS, "range")
            .into_iter()
            .map(|(range, ru)| {
                let old = old_ru.get(&range).copied().unwrap_or(0.0);
                (range, (ru - old).max(0.0))
            })
            .collect();
        let lateness = prom::bucket_delta(
            &after.buckets(names::LATENESS),
            &before.buckets(names::LATENESS),
        );
        Ok(WriterFigures {
            received: delta(names::RECEIVED),
            written: delta(names::WRITTEN),
            dropped,
            throttled: delta(names::THROTTLED),
            ru_per_range,
            lateness_p50: prom::quantile(&lateness, 0.50),
            lateness_p99: prom::quantile(&lateness, 0.99),
        })
    }

    /// Positions with a final outcome (written or dropped).
    pub fn settled(&self) -> u64 {
        self.written + self.dropped.values().sum::<u64>()
    }

    /// The figures as text lines.
    pub fn lines(&self) -> Vec<String> {
        let secs = |v: Option<f64>| v.map_or("-".to_owned(), |s| format!("{s:.3} s"));
        let drops: Vec<String> = self
            .dropped
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        vec![
            format!(
                "writer: received {}   written {}   dropped {}   throttled (429) {}",
                self.received,
                self.written,
                if drops.is_empty() {
                    "none".to_owned()
                } else {
                    drops.join(", ")
                },
                self.throttled
            ),
            format!(
                "writer lateness p50 {}   p99 {}",
                secs(self.lateness_p50),
                secs(self.lateness_p99)
            ),
            format!(
                "writer RU by partition key range: {}",
                if self.ru_per_range.is_empty() {
                    "-".to_owned()
                } else {
                    self.ru_per_range
                        .iter()
                        .map(|(range, ru)| format!("{range}: {ru:.0}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
        ]
    }
}

/// Why the writer's metrics could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The HTTP request failed.
    #[error("cannot read the writer's metrics at {url}: {source}")]
    Http {
        /// The endpoint.
        url: String,
        /// What failed.
        #[source]
        source: reqwest::Error,
    },
    /// The answer is not Prometheus text.
    #[error("the writer's metrics at {url} are not Prometheus text: {source}")]
    Parse {
        /// The endpoint.
        url: String,
        /// What failed.
        #[source]
        source: prom::ParseError,
    },
    /// The metrics name a drop reason this build does not know.
    #[error("the writer's metrics at {url} are of another version: {source}")]
    Reason {
        /// The endpoint.
        url: String,
        /// The unknown reason.
        #[source]
        source: UnknownDropReason,
    },
}

/// Reads a writer's metrics endpoint over HTTP.
#[derive(Debug, Clone)]
pub struct WriterScraper {
    url: String,
    http: reqwest::Client,
}

impl WriterScraper {
    /// A scraper of `url` (e.g. `http://127.0.0.1:9464/metrics`).
    pub fn new(url: &str) -> WriterScraper {
        WriterScraper {
            url: url.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// One scrape.
    pub async fn scrape(&self) -> Result<Scrape, ScrapeError> {
        let http = |source| ScrapeError::Http {
            url: self.url.clone(),
            source,
        };
        let text = self
            .http
            .get(&self.url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(http)?
            .text()
            .await
            .map_err(http)?;
        Scrape::parse(&text).map_err(|source| ScrapeError::Parse {
            url: self.url.clone(),
            source,
        })
    }

    /// Scrapes until the writer has settled `expected` positions since `before` (or
    /// `timeout` passes, or nothing changes for two seconds), and returns the figures.
    pub async fn wait_caught_up(
        &self,
        before: &Scrape,
        expected: u64,
        timeout: Duration,
    ) -> Result<WriterFigures, ScrapeError> {
        let deadline = Instant::now() + timeout;
        let figures = |after: &Scrape| {
            WriterFigures::between(before, after).map_err(|source| ScrapeError::Reason {
                url: self.url.clone(),
                source,
            })
        };
        let mut last = figures(&self.scrape().await?)?;
        let mut unchanged_since = Instant::now();
        while last.settled() < expected
            && Instant::now() < deadline
            && unchanged_since.elapsed() < Duration::from_secs(2)
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = figures(&self.scrape().await?)?;
            if now != last {
                unchanged_since = Instant::now();
            }
            last = now;
        }
        Ok(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_differences_between_scrapes() {
        let before = Scrape::parse(
            "cloud_writer_messages_received_total 100\n\
             cloud_writer_documents_written_total 90\n\
             cloud_writer_messages_dropped_total{reason=\"stale\"} 5\n\
             cloud_writer_lateness_device_to_written_seconds_bucket{le=\"1\"} 100\n\
             cloud_writer_lateness_device_to_written_seconds_bucket{le=\"+Inf\"} 100\n",
        )
        .unwrap();
        let after = Scrape::parse(
            "cloud_writer_messages_received_total 300\n\
             cloud_writer_documents_written_total 250\n\
             cloud_writer_messages_dropped_total{reason=\"stale\"} 45\n\
             cloud_writer_messages_dropped_total{reason=\"invalid\"} 2\n\
             cloud_writer_cosmos_throttled_total 7\n\
             cloud_writer_cosmos_request_units_total{range=\"0\",kind=\"latest\"} 600.5\n\
             cloud_writer_cosmos_request_units_total{range=\"0\",kind=\"history\"} 100\n\
             cloud_writer_cosmos_request_units_total{range=\"1\"} 300\n\
             cloud_writer_lateness_device_to_written_seconds_bucket{le=\"1\"} 100\n\
             cloud_writer_lateness_device_to_written_seconds_bucket{le=\"+Inf\"} 300\n",
        )
        .unwrap();
        let figures = WriterFigures::between(&before, &after).unwrap();
        assert_eq!(figures.received, 200);
        assert_eq!(figures.written, 160);
        assert_eq!(figures.dropped[&DropReason::Stale], 40);
        assert_eq!(figures.dropped[&DropReason::Invalid], 2);
        assert_eq!(figures.throttled, 7);
        assert_eq!(figures.settled(), 202);
        // Every position of the interval was over 1 s late: the quantile says so.
        assert_eq!(figures.lateness_p50, Some(1.0));
        assert_eq!(figures.ru_per_range["0"], 700.5);
        let text = figures.lines().join("\n");
        assert!(text.contains("dropped stale 40, invalid 2"), "{text}");
        assert!(text.contains("range: 0: 700, 1: 300"), "{text}");
    }
}

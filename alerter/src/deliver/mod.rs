//! Delivery of alerts, at least once, as CloudEvents 1.0: to every destination (webhooks,
//! Event Grid topics), each alert retried with backoff on 408, 429, 5xx and transport
//! failures for up to `ALERT_RETRY_FOR`, then written to the dead-letter file. Any other
//! answer (a 4xx: the receiver refuses the event) dead-letters it at once.
//! [`Delivery::deliver`] returns once every alert is delivered or dead-lettered, so a
//! range's continuation, written after it, never passes an alert that is in neither place.
//!
//! A webhook gets one event per request (structured mode), in the order of the changes; an
//! Event Grid topic gets the alerts of a page in one batch.

mod dead_letter;
mod eventgrid;
mod webhook;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::{RequestBuilder, StatusCode};
use retry_backoff::{BackoffConfig, Jitter};
use serde_json::Value;

pub use dead_letter::DeadLetter;
pub use eventgrid::{EventGrid, EventGridAuth};
pub use webhook::{SIGNATURE_HEADER, Webhook, signature};

use crate::alert::Alert;
use crate::metrics::{Metrics, Outcome};

/// Where alerts go.
#[derive(Debug)]
pub enum Destination {
    /// A webhook.
    Webhook(Webhook),
    /// An Event Grid topic.
    EventGrid(EventGrid),
}

impl Destination {
    /// The name in logs and the dead-letter file (the URL without its query).
    fn name(&self) -> String {
        let url = match self {
            Destination::Webhook(w) => &w.url,
            Destination::EventGrid(g) => &g.endpoint,
        };
        let mut url = url.clone();
        url.set_query(None);
        url.to_string()
    }
}

/// The destinations and how hard each is tried.
#[derive(Debug)]
pub struct Delivery {
    destinations: Vec<Destination>,
    source: String,
    retry_for: Duration,
    backoff: BackoffConfig,
    dead_letter: DeadLetter,
    metrics: Arc<Metrics>,
    http: reqwest::Client,
}

/// The first wait after a failure, and the longest.
const BACKOFF: BackoffConfig = BackoffConfig {
    base: Duration::from_millis(250),
    cap: Duration::from_secs(30),
};

/// Time limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl Delivery {
    /// Delivery to `destinations`, events named by `source`, retried for `retry_for`, then
    /// dead-lettered to `dead_letter`.
    pub fn new(
        destinations: Vec<Destination>,
        source: String,
        retry_for: Duration,
        dead_letter: DeadLetter,
        metrics: Arc<Metrics>,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()?;
        Ok(Delivery {
            destinations,
            source,
            retry_for,
            backoff: BACKOFF,
            dead_letter,
            metrics,
            http,
        })
    }

    /// The CloudEvent of `alert`, with this delivery's source.
    pub fn event(&self, alert: &Alert) -> Value {
        alert.cloud_event(&self.source)
    }

    /// Delivers every event to every destination; returns when each is delivered or
    /// dead-lettered, with each one's outcome. Fails only if the dead-letter file cannot be
    /// written (then the events stay pending).
    pub async fn deliver(&self, events: &[Value]) -> std::io::Result<Vec<Outcome>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let failures = join_all(self.destinations.iter().map(|d| self.to(d, events))).await;
        let mut dead = vec![false; events.len()];
        for (destination, failed) in self.destinations.iter().zip(failures) {
            for (i, reason) in failed {
                tracing::warn!(destination = %destination.name(), id = %events[i]["id"], %reason, "alert dead-lettered");
                self.dead_letter
                    .write(&destination.name(), &reason, &events[i])
                    .await?;
                dead[i] = true;
            }
        }
        let mut outcomes = Vec::with_capacity(events.len());
        for (event, dead) in events.iter().zip(dead) {
            let outcome = if dead {
                Outcome::DeadLettered
            } else {
                Outcome::Delivered
            };
            self.metrics.alert(event, outcome);
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// Sends `events` to one destination: the events it did not take, by index, and why.
    async fn to(&self, destination: &Destination, events: &[Value]) -> Vec<(usize, String)> {
        let mut failed = Vec::new();
        match destination {
            Destination::Webhook(hook) => {
                for (i, event) in events.iter().enumerate() {
                    let body = serde_json::to_vec(event).expect("an event serializes");
                    let sent = self
                        .send(|| Ok(hook.request(&self.http, body.clone())))
                        .await;
                    if let Err(reason) = sent {
                        failed.push((i, reason));
                    }
                }
            }
            Destination::EventGrid(grid) => {
                for (n, batch) in events.chunks(eventgrid::MAX_BATCH).enumerate() {
                    let body = serde_json::to_vec(batch).expect("events serialize");
                    let sent = self
                        .send_async(|| grid.request(&self.http, body.clone()))
                        .await;
                    if let Err(reason) = sent {
                        let first = n * eventgrid::MAX_BATCH;
                        failed.extend((first..first + batch.len()).map(|i| (i, reason.clone())));
                    }
                }
            }
        }
        failed
    }

    async fn send(
        &self,
        request: impl Fn() -> Result<RequestBuilder, String>,
    ) -> Result<(), String> {
        self.send_async(|| std::future::ready(request())).await
    }

    /// Sends the request `request` builds until it is taken, refused, or `retry_for` has
    /// passed.
    async fn send_async<F>(&self, request: impl Fn() -> F) -> Result<(), String>
    where
        F: Future<Output = Result<RequestBuilder, String>>,
    {
        let deadline = Instant::now() + self.retry_for;
        let mut failures = 0u32;
        loop {
            let (why, retry_after) = match request().await?.send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) if is_transient(r.status()) => {
                    let after = r
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    (format!("answered {}", r.status()), after)
                }
                Ok(r) => return Err(format!("refused: answered {}", r.status())),
                Err(e) => (format!("failed: {e}"), None),
            };
            let wait = self
                .backoff
                .delay(failures, retry_after, Jitter::Equal, &mut rand::rng());
            failures += 1;
            if Instant::now() + wait > deadline {
                return Err(format!(
                    "{why}; still failing after {failures} tries in ALERT_RETRY_FOR ({:?})",
                    self.retry_for
                ));
            }
            tracing::debug!(%why, ?wait, "delivery failed; trying again");
            tokio::time::sleep(wait).await;
        }
    }
}

/// Whether an answer is worth another try: 408, 429 and 5xx.
fn is_transient(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

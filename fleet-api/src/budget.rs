//! What each caller may spend on Cosmos DB, and how many fan-out queries run at once.
//!
//! - Per identity (an API key's name, a token's subject; anonymous callers share one): a token
//!   bucket of request units refilled at `API_RU_PER_SEC_PER_IDENTITY`, holding one second of
//!   it. A read is let in while its caller's bucket is not in debt and charged afterwards with
//!   what it cost (the `x-ms-request-charge` of every call, summed over the fan-out and its
//!   retries), so an expensive query can leave its caller in debt. A caller in debt gets 429
//!   with `Retry-After` (whole seconds until the debt is repaid) before Cosmos DB is asked.
//! - Overall: at most `API_MAX_CONCURRENT_QUERIES` fan-out queries (near, within, all) run at
//!   once. One beyond waits up to [`QUEUE_WAIT`] for a slot, then gets 503 with
//!   `Retry-After: 1`: then the service, not the caller, is short.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cosmos::ReadCost;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::access::{Caller, Identity};
use crate::metrics::{Metrics, Refused};

/// How long a fan-out query waits for a slot before it is answered 503.
pub const QUEUE_WAIT: Duration = Duration::from_secs(1);

/// Buckets kept before full ones (which a new caller would get anyway) are forgotten.
const BUCKETS_KEPT: usize = 10_000;

/// The RU each identity may spend per second: a number above 0, or `off`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RuBudget {
    /// No budget: every read goes to Cosmos DB.
    Off,
    /// RU per second per identity (and the burst: one second of it).
    PerSec(f64),
}

impl FromStr for RuBudget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" => Ok(RuBudget::Off),
            n => match n.parse::<f64>() {
                Ok(ru) if ru.is_finite() && ru > 0.0 => Ok(RuBudget::PerSec(ru)),
                _ => Err(format!("'{n}' is not a number of RU above 0 or 'off'")),
            },
        }
    }
}

impl<'de> Deserialize<'de> for RuBudget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            N(f64),
            S(String),
        }
        let text = match Form::deserialize(d)? {
            Form::N(n) => n.to_string(),
            Form::S(s) => s,
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for RuBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuBudget::Off => f.write_str("off"),
            RuBudget::PerSec(ru) => write!(f, "{ru}"),
        }
    }
}

/// One identity's RU: what it may still spend (negative: its debt), as of `last`.
#[derive(Debug)]
struct Bucket {
    ru: f64,
    last: Instant,
}

/// The budgets of every identity and the slots of fan-out queries.
#[derive(Debug)]
pub struct Limits {
    budget: RuBudget,
    buckets: Mutex<HashMap<Identity, Bucket>>,
    fan_outs: Semaphore,
    metrics: Arc<Metrics>,
}

impl Limits {
    /// Budgets of `budget` per identity, at most `max_concurrent` fan-out queries at once.
    pub fn new(budget: RuBudget, max_concurrent: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            budget,
            buckets: Mutex::default(),
            fan_outs: Semaphore::new(max_concurrent),
            metrics,
        }
    }

    /// `Ok` if `who` may read now, else how long until its debt is repaid.
    fn admit(&self, who: &Identity) -> Result<(), Duration> {
        let RuBudget::PerSec(rate) = self.budget else {
            return Ok(());
        };
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("budget lock is never poisoned");
        let Some(bucket) = buckets.get_mut(who) else {
            return Ok(());
        };
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.ru = (bucket.ru + elapsed * rate).min(rate);
        bucket.last = now;
        if bucket.ru > 0.0 {
            Ok(())
        } else {
            Err(Duration::from_secs_f64(-bucket.ru / rate))
        }
    }

    /// Charges `who` with `ru`, what one of its reads cost.
    fn charge(&self, who: &Identity, ru: f64) {
        let RuBudget::PerSec(rate) = self.budget else {
            return;
        };
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("budget lock is never poisoned");
        if buckets.len() >= BUCKETS_KEPT && !buckets.contains_key(who) {
            buckets.retain(|_, b| {
                b.ru + now.saturating_duration_since(b.last).as_secs_f64() * rate < rate
            });
        }
        let bucket = buckets.entry(who.clone()).or_insert(Bucket {
            ru: rate,
            last: now,
        });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.ru = (bucket.ru + elapsed * rate).min(rate) - ru;
        bucket.last = now;
    }
}

/// The answer to a refused read: `status`, `Retry-After` in whole seconds (at least 1), and
/// a JSON body saying why.
fn refused(status: StatusCode, wait: Duration, code: &str, message: String) -> Response {
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut response = (
        status,
        axum::Json(json!({"error": code, "message": message})),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// Middleware of every read: refuses a caller in debt (429), and charges what the read cost
/// (the answer's [`ReadCost`]). Runs inside the route's guard, which put the [`Caller`] in.
pub async fn budget(State(limits): State<Arc<Limits>>, request: Request, next: Next) -> Response {
    let who = request
        .extensions()
        .get::<Caller>()
        .map_or(Identity::Anonymous, |c| c.identity.clone());
    if let Err(wait) = limits.admit(&who) {
        limits.metrics.record_refusal(Refused::IdentityBudget);
        return refused(
            StatusCode::TOO_MANY_REQUESTS,
            wait,
            "over_budget",
            format!(
                "{who} has spent its {} RU/s of Cosmos DB reads (API_RU_PER_SEC_PER_IDENTITY); retry after the Retry-After seconds",
                limits.budget
            ),
        );
    }
    let response = next.run(request).await;
    if let Some(cost) = response.extensions().get::<ReadCost>() {
        limits.charge(&who, cost.request_charge);
    }
    response
}

/// Middleware of the fan-out queries: holds one of the slots while the query runs; without a
/// slot within [`QUEUE_WAIT`], 503.
pub async fn fan_out_slot(
    State(limits): State<Arc<Limits>>,
    request: Request,
    next: Next,
) -> Response {
    let Ok(Ok(_slot)) = tokio::time::timeout(QUEUE_WAIT, limits.fan_outs.acquire()).await else {
        limits.metrics.record_refusal(Refused::Concurrency);
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(1),
            "busy",
            "every fan-out query slot is taken (API_MAX_CONCURRENT_QUERIES); retry shortly".into(),
        );
    };
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(budget: RuBudget) -> Limits {
        Limits::new(budget, 1, Arc::new(Metrics::default()))
    }

    #[test]
    fn budgets_parse_as_a_positive_number_or_off() {
        assert_eq!("250".parse(), Ok(RuBudget::PerSec(250.0)));
        assert_eq!("off".parse(), Ok(RuBudget::Off));
        assert!("0".parse::<RuBudget>().is_err());
        assert!("-5".parse::<RuBudget>().is_err());
        assert!("lots".parse::<RuBudget>().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_in_debt_waits_until_it_is_repaid() {
        let limits = limits(RuBudget::PerSec(100.0));
        let who = Identity::Key("ci".into());
        assert!(limits.admit(&who).is_ok());
        // 100 RU of burst, then a query of 250 RU: 150 RU of debt, 1.5 s at 100 RU/s.
        limits.charge(&who, 250.0);
        assert_eq!(limits.admit(&who), Err(Duration::from_millis(1500)));
        tokio::time::advance(Duration::from_millis(1499)).await;
        assert!(limits.admit(&who).is_err());
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(limits.admit(&who).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn identities_have_budgets_of_their_own_and_off_is_no_budget() {
        let limits = limits(RuBudget::PerSec(10.0));
        let storm = Identity::Key("storm".into());
        limits.charge(&storm, 1000.0);
        assert!(limits.admit(&storm).is_err());
        assert!(limits.admit(&Identity::Key("calm".into())).is_ok());
        assert!(limits.admit(&Identity::Anonymous).is_ok());
        let off = self::limits(RuBudget::Off);
        off.charge(&storm, 1e9);
        assert!(off.admit(&storm).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_holds_one_second_of_budget() {
        let limits = limits(RuBudget::PerSec(100.0));
        let who = Identity::Anonymous;
        limits.charge(&who, 0.0);
        tokio::time::advance(Duration::from_secs(60)).await;
        // A minute of idling saved no more than one second of budget.
        limits.charge(&who, 100.0);
        assert!(limits.admit(&who).is_err());
    }
}

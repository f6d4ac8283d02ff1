//! What each caller may spend on Cosmos DB, and how many fan-out queries run at once.
//!
//! - Per caller ([`Who`]: an API key's name, a token's subject; an anonymous caller by its
//!   client's address): a token bucket of request units refilled at
//!   `API_RU_PER_SEC_PER_IDENTITY`, holding one second of it. A read is let in while its
//!   caller's bucket is not in debt, and reserves an estimate then (the mean charge of the
//!   route's recent reads), so that concurrent reads cannot all be let in on one balance; when
//!   it is answered the reservation is settled on what it cost (the `x-ms-request-charge` of
//!   every call, summed over the fan-out and its retries), so an expensive query can leave its
//!   caller in debt. A caller in debt gets 429 with `Retry-After` (whole seconds until the debt
//!   is repaid) before Cosmos DB is asked. A charge that is not a finite number is left out
//!   (the estimate stays charged) and counted.
//! - Overall: at most `API_MAX_CONCURRENT_QUERIES` fan-out queries (near, within, all) run at
//!   once, and at most `API_MAX_CONCURRENT_QUERIES_PER_IDENTITY` of one caller (one more of
//!   that caller's gets 429 at once). One beyond the overall cap waits up to [`QUEUE_WAIT`]
//!   for a slot, then gets 503 with `Retry-After: 1`: then the service, not the caller, is
//!   short. A request's body is read in full before ([`crate::intake`]).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cosmos::ReadCost;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::caps::{PerCaller, Who};
use crate::metrics::{Metrics, Refused};

/// How long a fan-out query waits for a slot before it is answered 503.
pub const QUEUE_WAIT: Duration = Duration::from_secs(1);

/// Buckets kept before full ones (which a new caller would get anyway) are forgotten.
const BUCKETS_KEPT: usize = 10_000;
/// What a read of a route not yet seen is estimated at, RU (a point read).
const FIRST_ESTIMATE: f64 = 1.0;
/// The weight of the newest charge in a route's estimate.
const ESTIMATE_WEIGHT: f64 = 0.2;

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

/// The budgets of every caller and the slots of fan-out queries.
#[derive(Debug)]
pub struct Limits {
    budget: RuBudget,
    buckets: Mutex<HashMap<Who, Bucket>>,
    /// Each route's estimate of a read, RU.
    estimates: Mutex<HashMap<String, f64>>,
    fan_outs: Semaphore,
    fan_outs_per_caller: PerCaller,
    metrics: Arc<Metrics>,
}

/// An estimate charged to a caller at admission, until its read's cost is known.
#[derive(Debug)]
#[must_use = "a reservation is settled on the read's cost"]
pub struct Reservation {
    ru: f64,
}

/// A lock that a panic elsewhere does not make unusable (the data are numbers, each write
/// whole).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Limits {
    /// Budgets of `budget` per caller, at most `max_concurrent` fan-out queries at once and
    /// `per_caller` of one caller.
    pub fn new(
        budget: RuBudget,
        max_concurrent: usize,
        per_caller: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            budget,
            buckets: Mutex::default(),
            estimates: Mutex::default(),
            fan_outs: Semaphore::new(max_concurrent),
            fan_outs_per_caller: PerCaller::new(per_caller),
            metrics,
        }
    }

    /// The estimate of a read of `route`.
    fn estimate(&self, route: &str) -> f64 {
        lock(&self.estimates)
            .get(route)
            .copied()
            .unwrap_or(FIRST_ESTIMATE)
    }

    /// `who`'s bucket, refilled to now.
    fn bucket<'a>(buckets: &'a mut HashMap<Who, Bucket>, who: &Who, rate: f64) -> &'a mut Bucket {
        let now = Instant::now();
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
        bucket.ru = (bucket.ru + elapsed * rate).min(rate);
        bucket.last = now;
        bucket
    }

    /// If `who` may read now, reserves `estimate` RU of its budget; else how long until its
    /// debt is repaid.
    fn admit(&self, who: &Who, estimate: f64) -> Result<Reservation, Duration> {
        let RuBudget::PerSec(rate) = self.budget else {
            return Ok(Reservation { ru: 0.0 });
        };
        let mut buckets = lock(&self.buckets);
        let bucket = Self::bucket(&mut buckets, who, rate);
        if bucket.ru > 0.0 {
            bucket.ru -= estimate;
            Ok(Reservation { ru: estimate })
        } else {
            Err(Duration::try_from_secs_f64(-bucket.ru / rate).unwrap_or(Duration::MAX))
        }
    }

    /// Settles `reservation`, made for a read of `route` by `who`, on `ru`, what the read
    /// cost (none: Cosmos DB was not asked, and the route's estimate learns nothing); a cost
    /// that is not a finite number leaves the estimate charged, and is counted.
    fn settle(&self, who: &Who, route: &str, reservation: Reservation, ru: Option<f64>) {
        let ru = match ru {
            Some(ru) if !ru.is_finite() => {
                self.metrics.record_unusable_charge();
                tracing::warn!(%who, route, charge = ru, "Cosmos DB reported a request charge that is not a number; left out of the budget");
                return;
            }
            Some(ru) => {
                let mut estimates = lock(&self.estimates);
                let estimate = estimates.entry(route.to_string()).or_insert(ru);
                *estimate += (ru - *estimate) * ESTIMATE_WEIGHT;
                ru
            }
            None => 0.0,
        };
        let RuBudget::PerSec(rate) = self.budget else {
            return;
        };
        let mut buckets = lock(&self.buckets);
        let bucket = Self::bucket(&mut buckets, who, rate);
        bucket.ru += reservation.ru - ru;
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

/// Middleware of every read: refuses a caller in debt (429), reserves the route's estimate,
/// and settles it on what the read cost (the answer's [`ReadCost`]). Runs inside the route's
/// guard, which put the [`crate::access::Caller`] in.
pub async fn budget(State(limits): State<Arc<Limits>>, request: Request, next: Next) -> Response {
    let who = Who::of(request.extensions());
    let route = request.extensions().get::<MatchedPath>().map_or_else(
        || request.uri().path().to_string(),
        |p| p.as_str().to_string(),
    );
    let reservation = match limits.admit(&who, limits.estimate(&route)) {
        Ok(reservation) => reservation,
        Err(wait) => {
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
    };
    let response = next.run(request).await;
    let cost = response
        .extensions()
        .get::<ReadCost>()
        .map(|cost| cost.request_charge);
    limits.settle(&who, &route, reservation, cost);
    response
}

/// Middleware of the fan-out queries: holds one of the caller's slots and one of all while
/// the query runs; the caller's all taken, 429 at once; none of all within [`QUEUE_WAIT`],
/// 503.
pub async fn fan_out_slot(
    State(limits): State<Arc<Limits>>,
    request: Request,
    next: Next,
) -> Response {
    let who = Who::of(request.extensions());
    let Some(_held) = limits.fan_outs_per_caller.take(&who) else {
        limits.metrics.record_refusal(Refused::CallerConcurrency);
        return refused(
            StatusCode::TOO_MANY_REQUESTS,
            Duration::from_secs(1),
            "too_many_at_once",
            format!(
                "{who} already runs {} fan-out queries (API_MAX_CONCURRENT_QUERIES_PER_IDENTITY); wait for one to finish",
                limits.fan_outs_per_caller.max()
            ),
        );
    };
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
    use crate::access::Identity;

    fn limits(budget: RuBudget) -> Limits {
        Limits::new(budget, 1, 1, Arc::new(Metrics::default()))
    }

    fn key(name: &str) -> Who {
        Who::Caller(Identity::Key(name.into()))
    }

    /// A read of `ru` by `who`, admitted on an estimate of `estimate`.
    fn read(limits: &Limits, who: &Who, estimate: f64, ru: f64) {
        let reservation = limits.admit(who, estimate).expect("admitted");
        limits.settle(who, "/r", reservation, Some(ru));
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
        let who = key("ci");
        // 100 RU of burst, then a query of 250 RU: 150 RU of debt, 1.5 s at 100 RU/s.
        read(&limits, &who, 1.0, 250.0);
        assert_eq!(
            limits.admit(&who, 1.0).map(|_| ()),
            Err(Duration::from_millis(1500))
        );
        tokio::time::advance(Duration::from_millis(1499)).await;
        assert!(limits.admit(&who, 1.0).is_err());
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(limits.admit(&who, 1.0).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_reads_are_let_in_only_on_what_is_left_after_their_estimates() {
        let limits = limits(RuBudget::PerSec(100.0));
        let who = key("burst");
        // Estimates of 30 RU: the fourth read finds the bucket spent by the three before it,
        // none of which has been answered yet.
        let held: Vec<_> = (0..4).map(|_| limits.admit(&who, 30.0)).collect();
        assert_eq!(held.iter().filter(|r| r.is_ok()).count(), 4);
        assert!(limits.admit(&who, 30.0).is_err());
        // Settled on 5 RU each: 100 RU of estimates given back less 20 spent.
        for reservation in held.into_iter().flatten() {
            limits.settle(&who, "/r", reservation, Some(5.0));
        }
        assert!(limits.admit(&who, 30.0).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_charge_that_is_not_a_number_is_counted_and_leaves_the_estimate_charged() {
        let limits = limits(RuBudget::PerSec(100.0));
        let who = key("odd");
        for charge in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            read(&limits, &who, 10.0, charge);
        }
        // 30 RU of estimates stay charged, and the budget still works.
        read(&limits, &who, 1.0, 80.0);
        assert!(limits.admit(&who, 1.0).is_err());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(limits.admit(&who, 1.0).is_ok());
        assert!(
            limits
                .metrics
                .render()
                .contains("fleet_api_charge_not_finite_total 3"),
            "{}",
            limits.metrics.render()
        );
        // The route's estimate learnt nothing from them.
        assert!(limits.estimate("/r").is_finite());
    }

    #[tokio::test(start_paused = true)]
    async fn a_routes_estimate_follows_its_charges() {
        let limits = limits(RuBudget::Off);
        let who = key("ci");
        assert_eq!(limits.estimate("/r"), FIRST_ESTIMATE);
        read(&limits, &who, 1.0, 40.0);
        assert_eq!(limits.estimate("/r"), 40.0);
        read(&limits, &who, 1.0, 90.0);
        assert_eq!(limits.estimate("/r"), 50.0);
        // A request refused before Cosmos DB was asked teaches it nothing.
        let reservation = limits.admit(&who, 50.0).unwrap();
        limits.settle(&who, "/r", reservation, None);
        assert_eq!(limits.estimate("/r"), 50.0);
    }

    #[tokio::test(start_paused = true)]
    async fn callers_have_budgets_of_their_own_and_off_is_no_budget() {
        let limits = limits(RuBudget::PerSec(10.0));
        let storm = key("storm");
        read(&limits, &storm, 1.0, 1000.0);
        assert!(limits.admit(&storm, 1.0).is_err());
        assert!(limits.admit(&key("calm"), 1.0).is_ok());
        let a = Who::Client("192.0.2.1".parse().unwrap());
        let b = Who::Client("192.0.2.2".parse().unwrap());
        read(&limits, &a, 1.0, 1000.0);
        assert!(limits.admit(&a, 1.0).is_err());
        assert!(
            limits.admit(&b, 1.0).is_ok(),
            "anonymous clients share no bucket"
        );
        let off = self::limits(RuBudget::Off);
        read(&off, &storm, 1.0, 1e9);
        assert!(off.admit(&storm, 1.0).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_holds_one_second_of_budget() {
        let limits = limits(RuBudget::PerSec(100.0));
        let who = key("idle");
        read(&limits, &who, 0.0, 0.0);
        tokio::time::advance(Duration::from_secs(60)).await;
        // A minute of idling saved no more than one second of budget.
        read(&limits, &who, 0.0, 100.0);
        assert!(limits.admit(&who, 0.0).is_err());
    }
}

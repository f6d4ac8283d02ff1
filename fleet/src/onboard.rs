//! Onboarding a simulated fleet through the Device Provisioning Service (DPS): every drone
//! registers as the edge agent does (its settings checked by the agent's configuration
//! code, its key derived from the enrollment group's, [`edge_agent::register`]),
//! a bounded number at once, and gets the settings of the hub DPS assigned it. Owns the
//! tally of registrations (live, and totals by failure reason) that the demo's view and
//! report and the load generator's report show.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edge_agent::RegisterError;
use edge_agent::Settings as AgentSettings;
use serde::Serialize;

/// Registrations in flight at once.
pub const CONCURRENCY: usize = 50;
/// Attempts per drone: a registration that failed on the way (no connection, no answer
/// in time, DPS asking to wait) is tried again; a refusal is final.
const ATTEMPTS: u32 = 3;
/// The pause before another attempt when DPS named no wait.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The registrations of a fleet so far: shared by the registering tasks and whoever
/// shows them.
#[derive(Debug, Clone)]
pub struct Registrations {
    inner: Arc<Tally>,
}

#[derive(Debug)]
struct Tally {
    drones: usize,
    started: Instant,
    registered: AtomicU64,
    failed: Mutex<BTreeMap<String, u64>>,
    finished_after: Mutex<Option<Duration>>,
}

/// The registrations of a fleet at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RegistrationTotals {
    /// Drones to register.
    pub drones: usize,
    /// Drones DPS assigned to a hub.
    pub registered: u64,
    /// Drones that could not register, by the reason of their last attempt.
    pub failed: BTreeMap<String, u64>,
    /// Seconds from the first registration to the last outcome (so far, while running).
    pub secs: f64,
    /// Registrations in flight at once.
    pub concurrency: usize,
}

impl RegistrationTotals {
    /// One line: `drones registered through DPS: 1000 of 1000 in 2.1 s (50 at once),
    /// failures none`, or the failures by reason.
    pub fn line(&self) -> String {
        let failures = if self.failed.is_empty() {
            "none".to_owned()
        } else {
            self.failed
                .iter()
                .map(|(reason, n)| format!("{reason} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "drones registered through DPS: {} of {} in {:.1} s ({} at once), failures {failures}",
            self.registered, self.drones, self.secs, self.concurrency
        )
    }
}

/// A fleet's registrations as the demo reports them: its own tally, and the registrations
/// the hub's provisioning service counts as assigned (an independent count).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Onboarding {
    /// The fleet's tally.
    #[serde(flatten)]
    pub totals: RegistrationTotals,
    /// Registrations the service assigned.
    pub assigned_by_dps: u64,
}

impl Onboarding {
    /// The tally's line and the service's count.
    pub fn line(&self) -> String {
        format!(
            "{}; the hub's DPS assigned {}",
            self.totals.line(),
            self.assigned_by_dps
        )
    }
}

impl Registrations {
    /// A tally for `drones` registrations, starting now.
    pub fn new(drones: usize) -> Registrations {
        Registrations {
            inner: Arc::new(Tally {
                drones,
                started: Instant::now(),
                registered: AtomicU64::new(0),
                failed: Mutex::new(BTreeMap::new()),
                finished_after: Mutex::new(None),
            }),
        }
    }

    /// The totals now.
    pub fn totals(&self) -> RegistrationTotals {
        let tally = &self.inner;
        let secs = tally
            .finished_after
            .lock()
            .expect("the tally is not poisoned")
            .unwrap_or_else(|| tally.started.elapsed());
        RegistrationTotals {
            drones: tally.drones,
            registered: tally.registered.load(Ordering::Relaxed),
            failed: tally
                .failed
                .lock()
                .expect("the tally is not poisoned")
                .clone(),
            secs: secs.as_secs_f64(),
            concurrency: CONCURRENCY,
        }
    }

    fn assigned(&self) {
        self.inner.registered.fetch_add(1, Ordering::Relaxed);
    }

    fn failed(&self, reason: String) {
        *self
            .inner
            .failed
            .lock()
            .expect("the tally is not poisoned")
            .entry(reason)
            .or_default() += 1;
    }

    fn finish(&self) {
        *self
            .inner
            .finished_after
            .lock()
            .expect("the tally is not poisoned") = Some(self.inner.started.elapsed());
    }
}

/// Registers each of `registration_ids` through DPS as `group` says (its `DPS_ID_SCOPE`,
/// `DPS_ENDPOINT`, `DPS_GROUP_KEY`, `IOTHUB_CA_FILE`, and whatever else every drone
/// shares), [`CONCURRENCY`] at once, counting each outcome in `registrations`. Returns, in
/// the order of the ids, each drone's settings as a provisioned agent runs (the assigned
/// hub's connection string with its derived key), or `None` for a drone that did not
/// register (logged, and counted by reason).
pub async fn register_fleet(
    group: &AgentSettings,
    registration_ids: &[String],
    registrations: &Registrations,
) -> Vec<Option<AgentSettings>> {
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for (index, id) in registration_ids.iter().enumerate() {
        let settings = AgentSettings {
            dps_registration_id: Some(id.clone()),
            ..group.clone()
        };
        let permits = permits.clone();
        let registrations = registrations.clone();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("never closed");
            let outcome = register_one(settings).await;
            match &outcome {
                Ok(_) => registrations.assigned(),
                Err(reason) => registrations.failed(reason.clone()),
            }
            (index, outcome.ok())
        });
    }
    let mut provisioned = vec![None; registration_ids.len()];
    while let Some(joined) = tasks.join_next().await {
        let (index, settings) = joined.expect("a registration does not panic");
        provisioned[index] = settings;
    }
    registrations.finish();
    provisioned
}

/// One drone's registration, tried again as [`ATTEMPTS`] says; the reason of the last
/// failure.
async fn register_one(settings: AgentSettings) -> Result<AgentSettings, String> {
    let id = settings.dps_registration_id.clone().unwrap_or_default();
    let dps = match settings.dps() {
        Ok(Some(dps)) => dps,
        Ok(None) => unreachable!("the registration id and scope are set"),
        Err(err) => {
            tracing::error!(registration_id = id, error = %err, "DPS settings refused");
            return Err("settings refused".to_owned());
        }
    };
    let attestation = dps.attestation().map_err(|err| {
        tracing::error!(registration_id = id, error = %err, "no device key");
        "group key not base64".to_owned()
    })?;
    let mut attempt = 1;
    loop {
        match edge_agent::register(&dps, &attestation).await {
            Ok(assignment) => return Ok(settings.provisioned(&assignment, &attestation)),
            Err(err) => {
                tracing::warn!(registration_id = id, attempt, error = %err, "DPS registration failed");
                if attempt == ATTEMPTS || !transient(&err) {
                    return Err(reason(&err));
                }
                tokio::time::sleep(err.retry_after().unwrap_or(RETRY_PAUSE)).await;
                attempt += 1;
            }
        }
    }
}

/// Whether another attempt may succeed: the way failed, or DPS asked to wait.
fn transient(err: &RegisterError) -> bool {
    match err {
        RegisterError::Connection { .. } | RegisterError::Timeout(_) => true,
        RegisterError::Refused { retry_after, .. } => retry_after.is_some(),
        RegisterError::Key(_)
        | RegisterError::Tls(_)
        | RegisterError::Unreadable(_)
        | RegisterError::HubNotAllowed { .. } => false,
    }
}

/// A failure's reason as the tally counts it: the kind, and DPS's status and error code.
fn reason(err: &RegisterError) -> String {
    match err {
        RegisterError::Key(_) => "device key not base64".to_owned(),
        RegisterError::Tls(_) => "TLS setup".to_owned(),
        RegisterError::Connection { .. } => "no connection".to_owned(),
        RegisterError::Timeout(_) => "no answer in time".to_owned(),
        RegisterError::Unreadable(_) => "unreadable answer".to_owned(),
        RegisterError::HubNotAllowed { .. } => "hub not allowed".to_owned(),
        RegisterError::Refused {
            status, error_code, ..
        } => match error_code {
            Some(code) => format!("refused {status} ({code})"),
            None => format!("refused {status}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_failures_by_reason() {
        let mut totals = RegistrationTotals {
            drones: 1000,
            registered: 1000,
            failed: BTreeMap::new(),
            secs: 2.04,
            concurrency: 50,
        };
        assert_eq!(totals.registered, totals.drones as u64);
        assert_eq!(
            totals.line(),
            "drones registered through DPS: 1000 of 1000 in 2.0 s (50 at once), failures none"
        );
        let onboarding = Onboarding {
            totals: totals.clone(),
            assigned_by_dps: 1000,
        };
        assert!(
            onboarding
                .line()
                .ends_with("failures none; the hub's DPS assigned 1000"),
            "{}",
            onboarding.line()
        );
        totals.registered = 997;
        totals.failed = BTreeMap::from([
            ("no answer in time".to_owned(), 1),
            ("refused 401 (401002)".to_owned(), 2),
        ]);
        assert!(totals.registered < totals.drones as u64);
        assert!(
            totals
                .line()
                .ends_with("997 of 1000 in 2.0 s (50 at once), failures no answer in time 1, refused 401 (401002) 2"),
            "{}",
            totals.line()
        );
    }

    #[test]
    fn refusals_are_final_and_waits_are_not() {
        let refused = |retry_after| RegisterError::Refused {
            status: 401,
            error_code: Some(401002),
            message: "Unauthorized".into(),
            retry_after,
        };
        assert!(!transient(&refused(None)));
        assert_eq!(reason(&refused(None)), "refused 401 (401002)");
        assert!(transient(&refused(Some(Duration::from_secs(1)))));
        assert!(transient(&RegisterError::Timeout(Duration::from_secs(30))));
    }
}

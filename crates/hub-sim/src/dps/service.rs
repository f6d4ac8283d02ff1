//! The provisioning service's decisions and what it keeps: the ID scope, the enrollments, the
//! linked hubs, the registrations (kept in `dps-registrations.json`) and the operations in
//! flight (in memory: a device that lost its operation registers again). A register request
//! that attests is assigned at once (its device created on the chosen hub) and answered 202
//! `assigning`; its status polls are answered `assigning` a set number of times, then 200
//! `assigned`.

use super::DpsConfig;
use super::allocation::choose;
use super::attestation::{Credential, attest};
use super::enrollment::{EnrollmentError, EnrollmentId, Enrollments, check_name};
use super::protocol::{Failure, timestamp};
use crate::hub::Hub;
use crate::state_dir::{self, StateError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// Provisioning service errors.
#[derive(Debug, thiserror::Error)]
pub enum DpsError {
    /// The enrollments.
    #[error(transparent)]
    Enrollment(#[from] EnrollmentError),
    /// The state directory.
    #[error(transparent)]
    State(#[from] StateError),
    /// A linked hub has this host name already: `assignedHub` could not tell them apart.
    #[cfg(any(test, feature = "test-support"))]
    #[error("a hub with host name `{0}` is linked already")]
    DuplicateHost(String),
}

/// A device the service has assigned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Registration {
    /// The registration id (also the device id).
    pub registration_id: String,
    /// The enrollment it attested with.
    pub enrollment: EnrollmentId,
    /// The host name of the hub it is assigned to.
    pub assigned_hub: String,
    /// Its device id on that hub.
    pub device_id: String,
    /// When it first registered.
    pub created_date_time_utc: String,
    /// When it last registered.
    pub last_updated_date_time_utc: String,
    /// Changes at every registration.
    pub etag: String,
    /// The payload the device sent with its latest register request (`null` if none). The
    /// service hands a device's payload only to a custom allocation webhook and answers
    /// without it, as this stand-in does.
    pub payload: Value,
}

impl Registration {
    fn state(&self, status: &str) -> Value {
        json!({
            "registrationId": self.registration_id,
            "createdDateTimeUtc": self.created_date_time_utc,
            "assignedHub": self.assigned_hub,
            "deviceId": self.device_id,
            "status": status,
            "substatus": "initialAssignment",
            "lastUpdatedDateTimeUtc": self.last_updated_date_time_utc,
            "etag": self.etag,
        })
    }
}

/// An answer to a request: its status, `retry-after` and body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<u64>,
    pub(crate) body: Value,
}

impl Answer {
    fn failure(failure: Failure, now: SystemTime) -> Answer {
        Answer {
            status: failure.status(),
            retry_after: None,
            body: failure.body(&uuid(), now),
        }
    }
}

struct Operation {
    registration_id: String,
    polls_left: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RegisterBody {
    registration_id: String,
    #[serde(default)]
    payload: Value,
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The provisioning service.
pub(crate) struct Dps {
    pub(crate) id_scope: String,
    pub(crate) enrollments: Enrollments,
    config: DpsConfig,
    file: PathBuf,
    registrations: Mutex<BTreeMap<String, Registration>>,
    hubs: RwLock<Vec<Arc<Hub>>>,
    operations: Mutex<HashMap<String, Operation>>,
}

impl Dps {
    /// The service kept in state directory `dir`, linked to hub `own`.
    pub(crate) fn open(dir: &Path, config: DpsConfig, own: Arc<Hub>) -> Result<Dps, DpsError> {
        let file = dir.join("dps-registrations.json");
        Ok(Dps {
            id_scope: state_dir::id_scope(dir)?,
            enrollments: Enrollments::open(&dir.join("enrollments.json"))?,
            config,
            registrations: Mutex::new(state_dir::read_json(&file)?.unwrap_or_default()),
            file,
            hubs: RwLock::new(vec![own]),
            operations: Mutex::default(),
        })
    }

    /// Links another hub (its host name must differ from every linked one's).
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn link(&self, hub: Arc<Hub>) -> Result<(), DpsError> {
        let mut hubs = self.hubs.write();
        if hubs.iter().any(|h| h.host.eq_ignore_ascii_case(&hub.host)) {
            return Err(DpsError::DuplicateHost(hub.host.clone()));
        }
        hubs.push(hub);
        Ok(())
    }

    /// The linked hubs' host names, in link order.
    pub(crate) fn linked_hosts(&self) -> Vec<String> {
        self.hubs.read().iter().map(|h| h.host.clone()).collect()
    }

    /// The registrations so far.
    pub(crate) fn registrations(&self) -> Vec<Registration> {
        self.registrations.lock().values().cloned().collect()
    }

    /// Answers a register request of the connection of `registration_id`.
    pub(crate) fn register(
        &self,
        registration_id: &str,
        credential: Credential<'_>,
        body: &[u8],
        now: SystemTime,
    ) -> Answer {
        match self.assign(registration_id, credential, body, now) {
            Ok(operation_id) => {
                self.count("registrations_assigned", "");
                Answer {
                    status: 202,
                    retry_after: Some(self.config.retry_after.as_secs()),
                    body: json!({ "operationId": operation_id, "status": "assigning" }),
                }
            }
            Err((failure, reason)) => {
                tracing::info!(
                    registration = registration_id,
                    reason,
                    "registration refused"
                );
                self.count("registrations_refused", reason);
                Answer::failure(failure, now)
            }
        }
    }

    /// Adds one to a counter of the hub that plays this service (the first linked).
    pub(crate) fn count(&self, name: &'static str, reason: &'static str) {
        self.hubs.read()[0].counters.add(name, reason, 1);
    }

    fn assign(
        &self,
        registration_id: &str,
        credential: Credential<'_>,
        body: &[u8],
        now: SystemTime,
    ) -> Result<String, (Failure, &'static str)> {
        let request: RegisterBody =
            serde_json::from_slice(body).map_err(|_| (Failure::BadRequest, "malformed_request"))?;
        if request.registration_id != registration_id {
            return Err((Failure::Unauthorized, "registration_id_not_connections"));
        }
        check_name(registration_id)
            .map_err(|_| (Failure::BadRequest, "invalid_registration_id"))?;
        let secs = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let attested = attest(
            &self.enrollments.book(),
            &self.id_scope,
            registration_id,
            credential,
            secs,
        )
        .map_err(|e| (Failure::Unauthorized, e.reason()))?;
        let hubs = self.hubs.read();
        let mut registrations = self.registrations.lock();
        let previous = registrations.get(registration_id);
        let kept = previous.and_then(|r| hubs.iter().find(|h| h.host == r.assigned_hub));
        let hub = match kept {
            Some(hub) => hub,
            None => {
                let assigned: Vec<usize> = hubs
                    .iter()
                    .map(|h| {
                        registrations
                            .values()
                            .filter(|r| r.assigned_hub == h.host)
                            .count()
                    })
                    .collect();
                &hubs[choose(self.config.allocation, registration_id, &assigned)]
            }
        };
        hub.registry
            .put(registration_id, attested.device_auth)
            .map_err(|e| {
                tracing::warn!(error = %e, "device not created on the assigned hub");
                (Failure::Internal, "device_not_created")
            })?;
        let stamp = timestamp(now);
        let registration = Registration {
            registration_id: registration_id.to_owned(),
            enrollment: attested.enrollment,
            assigned_hub: hub.host.clone(),
            device_id: registration_id.to_owned(),
            created_date_time_utc: previous
                .map_or_else(|| stamp.clone(), |r| r.created_date_time_utc.clone()),
            last_updated_date_time_utc: stamp,
            etag: BASE64.encode(format!("\"{}\"", uuid())),
            payload: request.payload,
        };
        registrations.insert(registration_id.to_owned(), registration);
        state_dir::write_json(&self.file, &*registrations).map_err(|e| {
            tracing::warn!(error = %e, "registrations not kept");
            (Failure::Internal, "registrations_not_kept")
        })?;
        let operation_id = format!("4.{:016x}.{}", rand::random::<u64>(), uuid());
        self.operations.lock().insert(
            operation_id.clone(),
            Operation {
                registration_id: registration_id.to_owned(),
                polls_left: self.config.assigning_polls,
            },
        );
        tracing::info!(registration = registration_id, hub = %hub.host, "registration assigned");
        Ok(operation_id)
    }

    /// Answers a status request of the connection of `registration_id`.
    pub(crate) fn status(
        &self,
        registration_id: &str,
        operation_id: &str,
        now: SystemTime,
    ) -> Answer {
        // Taken before the operations, as a register request takes them (one lock order).
        let registration = self.registrations.lock().get(registration_id).cloned();
        let mut operations = self.operations.lock();
        let (Some(operation), Some(registration)) = (
            operations
                .get_mut(operation_id)
                .filter(|op| op.registration_id == registration_id),
            registration,
        ) else {
            return Answer::failure(Failure::NotFound, now);
        };
        if operation.polls_left > 0 {
            operation.polls_left -= 1;
            return Answer {
                status: 202,
                retry_after: Some(self.config.retry_after.as_secs()),
                body: json!({
                    "operationId": operation_id,
                    "status": "assigning",
                    "registrationState": {
                        "registrationId": registration_id,
                        "status": "assigning",
                    },
                }),
            };
        }
        Answer {
            status: 200,
            retry_after: None,
            body: json!({
                "operationId": operation_id,
                "status": "assigned",
                "registrationState": registration.state("assigned"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dps::Allocation;
    use crate::dps::enrollment::derive_device_key;
    use crate::faults::Faults;
    use crate::hub::DeviceSessions;
    use crate::partitions::{Partitions, Retention};
    use crate::registry::{DeviceAuth, Registry};
    use crate::sas::make_token;
    use crate::stats::Counters;

    fn hub(host: &str) -> Arc<Hub> {
        Arc::new(Hub {
            host: host.into(),
            registry: Registry::in_memory(),
            partitions: Partitions::new(1, Retention::default()),
            faults: Faults::default(),
            counters: Counters::default(),
            sessions: DeviceSessions::default(),
            twins: crate::hub::twin::store::Twins::in_memory(),
            methods: Default::default(),
            events: crate::hub::twin::events::Events::new("hub", &[]),
        })
    }

    struct Fixture {
        dps: Dps,
        group_key: String,
        _dir: tempfile::TempDir,
    }

    fn fixture(config: DpsConfig, own: Arc<Hub>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let dps = Dps::open(dir.path(), config, own).unwrap();
        let group_key = dps.enrollments.add_symmetric_key_group("fleet").unwrap();
        Fixture {
            dps,
            group_key,
            _dir: dir,
        }
    }

    impl Fixture {
        fn token(&self, id: &str, key: &str) -> String {
            let key = BASE64.decode(key).unwrap();
            let resource = format!("{}/registrations/{id}", self.dps.id_scope);
            make_token(&resource, &key, u64::MAX / 2, Some("registration"))
        }

        fn register(&self, id: &str) -> Answer {
            let key = derive_device_key(&self.group_key, id).unwrap();
            let token = self.token(id, &key);
            let body = json!({ "registrationId": id, "payload": { "model": "x1" } });
            self.dps.register(
                id,
                Credential::Token(&token),
                body.to_string().as_bytes(),
                SystemTime::now(),
            )
        }
    }

    #[test]
    fn a_registration_is_assigning_then_assigned_and_its_device_exists() {
        let own = hub("hub-a.local");
        let config = DpsConfig {
            assigning_polls: 1,
            ..DpsConfig::default()
        };
        let f = fixture(config, own.clone());
        let answer = f.register("drone-1");
        assert_eq!(answer.status, 202);
        assert_eq!(answer.retry_after, Some(3));
        assert_eq!(answer.body["status"], "assigning");
        let operation = answer.body["operationId"].as_str().unwrap().to_owned();
        let now = SystemTime::now();
        let first = f.dps.status("drone-1", &operation, now);
        assert_eq!(
            (first.status, first.body["status"].as_str()),
            (202, Some("assigning"))
        );
        let done = f.dps.status("drone-1", &operation, now);
        assert_eq!(done.status, 200);
        assert_eq!(done.retry_after, None);
        let state = &done.body["registrationState"];
        assert_eq!(done.body["status"], "assigned");
        assert_eq!(state["assignedHub"], "hub-a.local");
        assert_eq!(state["deviceId"], "drone-1");
        assert_eq!(state["substatus"], "initialAssignment");
        assert!(state["etag"].is_string() && state["createdDateTimeUtc"].is_string());
        let derived = derive_device_key(&f.group_key, "drone-1").unwrap();
        assert!(matches!(
            own.registry.get("drone-1"),
            Some(DeviceAuth::Sas { primary_key, .. }) if primary_key == derived
        ));
        let kept = f.dps.registrations();
        assert_eq!(kept[0].payload, json!({ "model": "x1" }));
        assert_eq!(kept[0].enrollment, EnrollmentId::Group("fleet".into()));
        // Another registration's operation, and an unknown one, are not found.
        assert_eq!(
            f.dps.status("drone-2", &operation, now).body["errorCode"],
            404201
        );
        assert_eq!(f.dps.status("drone-1", "4.0.x", now).status, 404);
    }

    #[test]
    fn refusals_are_401002_and_create_nothing() {
        let own = hub("hub-a.local");
        let f = fixture(DpsConfig::default(), own.clone());
        let now = SystemTime::now();
        let body = json!({ "registrationId": "drone-1" }).to_string();
        let wrong = f.token("drone-1", &crate::sas::new_key());
        let answer = f
            .dps
            .register("drone-1", Credential::Token(&wrong), body.as_bytes(), now);
        assert_eq!(answer.status, 401);
        assert_eq!(answer.body["errorCode"], 401002);
        assert_eq!(answer.body["message"], "Unauthorized");
        let other_body = json!({ "registrationId": "drone-2" }).to_string();
        let key = derive_device_key(&f.group_key, "drone-1").unwrap();
        let good = f.token("drone-1", &key);
        let answer = f.dps.register(
            "drone-1",
            Credential::Token(&good),
            other_body.as_bytes(),
            now,
        );
        assert_eq!(answer.body["errorCode"], 401002);
        let answer = f
            .dps
            .register("drone-1", Credential::Token(&good), b"{", now);
        assert_eq!(
            (answer.status, answer.body["errorCode"].as_u64()),
            (400, Some(400004))
        );
        f.dps
            .enrollments
            .set_enabled(&EnrollmentId::Group("fleet".into()), false)
            .unwrap();
        assert_eq!(f.register("drone-1").body["errorCode"], 401002);
        assert!(own.registry.is_empty());
        assert!(f.dps.registrations().is_empty());
        let stats = crate::stats::Stats::collect(&own.counters, &own.partitions);
        let refused: Vec<(&str, u64)> = stats
            .registrations_refused
            .iter()
            .map(|(reason, n)| (reason.as_str(), *n))
            .collect();
        assert_eq!(
            refused,
            [
                ("enrollment_disabled", 1),
                ("malformed_request", 1),
                ("no_enrollment", 1),
                ("registration_id_not_connections", 1),
            ]
        );
        assert_eq!(stats.registrations_assigned, 0);
    }

    #[test]
    fn linked_hubs_share_a_fleet_and_a_device_keeps_its_hub() {
        let config = DpsConfig {
            allocation: Allocation::EvenlyDistributed,
            ..DpsConfig::default()
        };
        let (a, b) = (hub("hub-a.local"), hub("hub-b.local"));
        let f = fixture(config, a.clone());
        f.dps.link(b.clone()).unwrap();
        assert!(matches!(
            f.dps.link(hub("HUB-A.local")),
            Err(DpsError::DuplicateHost(_))
        ));
        for i in 0..10 {
            assert_eq!(f.register(&format!("drone-{i}")).status, 202);
        }
        assert_eq!((a.registry.len(), b.registry.len()), (5, 5));
        let before = f.dps.registrations()[0].clone();
        f.register(&before.registration_id);
        let after = f.dps.registrations()[0].clone();
        assert_eq!(after.assigned_hub, before.assigned_hub);
        assert_eq!(after.created_date_time_utc, before.created_date_time_utc);
        assert_ne!(after.etag, before.etag);
        assert_eq!(a.registry.len() + b.registry.len(), 10);
    }

    #[test]
    fn registrations_and_the_id_scope_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let first = Dps::open(dir.path(), DpsConfig::default(), hub("h")).unwrap();
        let key = first.enrollments.add_symmetric_key_group("fleet").unwrap();
        let derived = derive_device_key(&key, "d-1").unwrap();
        let token = make_token(
            &format!("{}/registrations/d-1", first.id_scope),
            &BASE64.decode(derived).unwrap(),
            u64::MAX / 2,
            Some("registration"),
        );
        let body = json!({ "registrationId": "d-1" }).to_string();
        let answer = first.register(
            "d-1",
            Credential::Token(&token),
            body.as_bytes(),
            SystemTime::now(),
        );
        assert_eq!(answer.status, 202);
        let again = Dps::open(dir.path(), DpsConfig::default(), hub("h")).unwrap();
        assert_eq!(again.id_scope, first.id_scope);
        assert!(again.id_scope.starts_with("0ne") && again.id_scope.len() == 11);
        assert_eq!(again.registrations(), first.registrations());
    }
}

//! The endpoint as a library: configure with [`CosmosSim::builder`], start it on a port, drive
//! its faults and read its statistics while it runs, shut it down.

use crate::endpoint_state::{EndpointState, check_ru_per_sec};
use crate::entra::{DataRole, EntraAccess, EntraTrust};
use crate::error::SimError;
use crate::faults::Faults;
use crate::stats::{Counters, Stats};
use crate::store::{CreateError, Store};
use cosmos_wire::auth::{EMULATOR_KEY, MasterKey};
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Configuration of an endpoint; see [`CosmosSim::builder`].
#[derive(Debug, Clone)]
pub struct CosmosSimBuilder {
    addr: SocketAddr,
    key: String,
    partitions: usize,
    ru_per_sec: f64,
    latency: Duration,
    local_auth: bool,
    entra: Option<EntraTrust>,
    assignments: HashMap<String, DataRole>,
}

impl Default for CosmosSimBuilder {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            key: EMULATOR_KEY.to_string(),
            partitions: 4,
            ru_per_sec: 10_000.0,
            latency: Duration::ZERO,
            local_auth: true,
            entra: None,
            assignments: HashMap::new(),
        }
    }
}

impl CosmosSimBuilder {
    /// Address to listen on (default `127.0.0.1:0`, a free port).
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// The account key, base64 (default: the emulator's well-known key).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// Physical partitions (ranges) of each new container (default 4).
    pub fn partitions(mut self, n: usize) -> Self {
        self.partitions = n;
        self
    }

    /// Provisioned RU/s of each new container, split evenly across its partitions (default
    /// 10,000; `f64::INFINITY` never throttles).
    pub fn ru_per_sec(mut self, ru: f64) -> Self {
        self.ru_per_sec = ru;
        self
    }

    /// Latency added to every request (default none).
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// Takes Entra ID tokens of `trust`'s issuer and tenant (default: none, only the key).
    pub fn entra(mut self, trust: EntraTrust) -> Self {
        self.entra = Some(trust);
        self
    }

    /// Assigns `role` to the principal whose token carries `oid` (object id), as a data-plane
    /// role assignment at the account's scope does. A principal without one is refused.
    pub fn role_assignment(mut self, oid: impl Into<String>, role: DataRole) -> Self {
        self.assignments.insert(oid.into(), role);
        self
    }

    /// Whether requests signed with the key are taken (default true); false is an account's
    /// `disableLocalAuth`, and needs [`Self::entra`].
    pub fn local_auth(mut self, on: bool) -> Self {
        self.local_auth = on;
        self
    }

    /// Binds the port and starts serving on the current tokio runtime; with an Entra trust,
    /// after reading the issuer's discovery document and keys.
    pub async fn start(self) -> Result<CosmosSim, SimError> {
        let key = MasterKey::from_base64(&self.key)?;
        if self.partitions == 0 || self.partitions > 1024 {
            return Err(SimError::Invalid(format!(
                "partitions must be 1 to 1024, not {}",
                self.partitions
            )));
        }
        check_ru_per_sec(self.ru_per_sec)?;
        if !self.local_auth && self.entra.is_none() {
            return Err(SimError::Invalid(
                "local authentication is disabled and no Entra ID issuer is trusted: no request could be served".into(),
            ));
        }
        let listener = TcpListener::bind(self.addr)
            .await
            .map_err(|source| SimError::Bind {
                addr: self.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: self.addr,
            source,
        })?;
        let entra = match self.entra {
            Some(trust) => {
                Some(EntraAccess::start(trust, &endpoint_url(addr), self.assignments).await?)
            }
            None => None,
        };
        let state = Arc::new(EndpointState {
            store: Store::default(),
            key: parking_lot::RwLock::new(key),
            local_auth: self.local_auth,
            entra,
            partitions: self.partitions,
            default_ru: self.ru_per_sec,
            faults: Faults::new(self.latency),
            counters: Counters::default(),
            addr,
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(crate::server::serve(listener, state.clone(), stop.clone()));
        tracing::info!(%addr, partitions = self.partitions, ru_per_sec = self.ru_per_sec, "cosmos-sim listening");
        Ok(CosmosSim {
            state,
            stop,
            task: Some(task),
            key: self.key,
        })
    }
}

/// A running endpoint. Dropping it stops the server.
#[derive(Debug)]
pub struct CosmosSim {
    state: Arc<EndpointState>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    key: String,
}

impl CosmosSim {
    /// A builder with the defaults: a free port on 127.0.0.1, the emulator key, 4 partitions per
    /// container, 10,000 RU/s per container, no latency.
    pub fn builder() -> CosmosSimBuilder {
        CosmosSimBuilder::default()
    }

    /// The endpoint URL, e.g. `http://127.0.0.1:8081/`.
    pub fn endpoint(&self) -> String {
        endpoint_url(self.state.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// The account key the endpoint started with (base64); [`CosmosSim::rotate_key`] does
    /// not change this answer.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Creates a database and a container with a hash v2 key on `pk_path` and
    /// `indexing_policy` (a container's `indexingPolicy`), or the default policy when `None`.
    pub fn create_container_indexed(
        &self,
        db: &str,
        coll: &str,
        pk_path: &str,
        indexing_policy: Option<&serde_json::Value>,
    ) -> Result<(), SimError> {
        match self.state.store.create_database(db) {
            Ok(_) | Err(CreateError::Conflict) => {}
            Err(e) => return Err(SimError::Create(format!("database {db}: {e:?}"))),
        }
        let mut definition =
            json!({"id": coll, "partitionKey": {"paths": [pk_path], "kind": "Hash", "version": 2}});
        if let Some(policy) = indexing_policy {
            definition["indexingPolicy"] = policy.clone();
        }
        self.state
            .store
            .create_container(
                db,
                &definition,
                self.state.partitions,
                self.state.default_ru,
            )
            .map(|_| ())
            .map_err(|e| SimError::Create(format!("container {db}/{coll}: {e:?}")))
    }

    /// A snapshot of requests, operations, throttling and the partition heat map.
    pub fn stats(&self) -> Stats {
        self.state.stats()
    }

    /// Stops accepting connections, closes the open ones, and waits for the server task.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// The calls only tests and benches make (cargo feature `test-support`): an endpoint that
/// never throttles, key rotation, role assignments and a skewed clock, containers created,
/// deleted, split and given RU/s directly, and the fault switches.
#[cfg(feature = "test-support")]
mod test_support {
    use super::CosmosSim;
    use crate::entra::DataRole;
    use crate::error::SimError;
    use crate::faults::FaultSettings;
    use cosmos_wire::resources::PartitionKeyRange;
    use std::time::Duration;

    impl CosmosSim {
        /// An endpoint of the default layout that never throttles, for tests and benches that
        /// measure something other than the RU budget.
        pub async fn unthrottled() -> Result<CosmosSim, SimError> {
            Self::builder().ru_per_sec(f64::INFINITY).start().await
        }

        /// Replaces the account key at run time, as a key rotation does: from now on only
        /// requests signed with `key` (base64) are served, others are answered 401.
        pub fn rotate_key(&self, key: &str) -> Result<(), SimError> {
            self.state.rotate_key(key)
        }

        /// Assigns principal `oid` the data role `role` at run time (`None` removes its
        /// assignment), as `az cosmosdb sql role assignment create` and `delete` do.
        pub fn assign_role(&self, oid: &str, role: Option<DataRole>) -> Result<(), SimError> {
            let entra = self.state.entra.as_ref().ok_or(SimError::NoEntraTrust)?;
            entra.assign(oid, role);
            tracing::info!(oid, ?role, "data role assignment changed");
            Ok(())
        }

        /// Runs the endpoint's clock `ahead` of this host's for the times of Entra ID tokens
        /// (a skewed service clock: tokens expire earlier in its eyes).
        pub fn set_clock_ahead(&self, ahead: Duration) -> Result<(), SimError> {
            let entra = self.state.entra.as_ref().ok_or(SimError::NoEntraTrust)?;
            entra.set_clock_ahead(ahead);
            Ok(())
        }

        /// Deletes a container and its documents at run time (as the REST `DELETE` does);
        /// requests naming it are answered 404 until it is created again.
        pub fn delete_container(&self, db: &str, coll: &str) -> Result<(), SimError> {
            self.state
                .store
                .delete_container(db, coll)
                .map(|_| tracing::info!(db, coll, "container deleted"))
                .ok_or_else(|| SimError::NoContainer(format!("{db}/{coll}")))
        }

        /// Sets the added latency.
        pub fn set_latency(&self, latency: Duration) {
            self.set_faults(FaultSettings {
                latency_ms: Some(latency.as_millis() as u64),
                ..Default::default()
            });
        }

        /// How many requests have begun waiting an added latency ([`Self::set_latency`]) since
        /// start: a test that stalls the writer knows the stall has reached a write.
        pub fn delayed_requests(&self) -> u64 {
            self.state.faults.delayed()
        }

        /// Sets the share of requests answered 503 (0 to 1).
        pub fn set_error_rate_503(&self, rate: f64) {
            self.set_faults(FaultSettings {
                error_rate_503: Some(rate),
                ..Default::default()
            });
        }

        /// Sets the share of requests held for `hold` and then answered 408 (0 to 1).
        pub fn set_timeout_rate(&self, rate: f64, hold: Duration) {
            self.set_faults(FaultSettings {
                timeout_rate: Some(rate),
                timeout_ms: Some(hold.as_millis() as u64),
                ..Default::default()
            });
        }

        /// Applies fault settings (only the given fields change).
        pub fn set_faults(&self, settings: FaultSettings) {
            self.state.faults.update(settings);
        }

        /// Splits a live range of a container in two; its id then answers 410/1002 and
        /// `pkranges` lists the two children.
        pub fn split_range(
            &self,
            db: &str,
            coll: &str,
            range_id: &str,
        ) -> Result<(PartitionKeyRange, PartitionKeyRange), SimError> {
            self.state.split_range(db, coll, range_id)
        }

        /// Changes a container's provisioned RU/s (split evenly across its live ranges).
        pub fn set_ru_per_sec(&self, db: &str, coll: &str, ru: f64) -> Result<(), SimError> {
            self.state.set_ru_per_sec(db, coll, ru)
        }

        /// Creates a database and a container with a hash v2 key on `pk_path` and the default
        /// indexing policy (also possible over REST; this is a shortcut for tests and benches).
        pub fn create_container(
            &self,
            db: &str,
            coll: &str,
            pk_path: &str,
        ) -> Result<(), SimError> {
            self.create_container_indexed(db, coll, pk_path, None)
        }
    }
}

/// The endpoint URL of an endpoint bound to `addr`.
fn endpoint_url(addr: SocketAddr) -> String {
    format!("http://{addr}/")
}

impl Drop for CosmosSim {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

//! The agent's control plane on IoT Hub: settings from the device twin, the agent's own
//! state in reported properties, and direct methods.
//!
//! - [`desired`]: what desired `reportInterval` and `publishEvery` do, and their
//!   acknowledgements (IoT Plug and Play writable-property convention).
//! - [`state`]: the pure state machine: versions applied, acknowledgements to confirm,
//!   reports and when they may go.
//! - [`reported`]: the agent's state as reported properties.
//! - [`store`]: the applied settings on disk.
//! - [`methods`]: `reportNow` and `status`.
//!
//! [`Control`] joins them to one link's [`CloudLink`] (the MQTT side lives in
//! [`crate::transport`]); the agent's loop feeds it the link's [`CloudEvent`]s and applies
//! the cadence it returns. In plain MQTT mode (`MQTT_URL`) there is no control plane.

mod desired;
mod methods;
mod reported;
mod state;
mod store;

use std::time::Duration;

use tokio::time::Instant;

use crate::cadence::{Cadence, RemoteConfig};
use crate::status::AgentStatus;
use crate::transport::{CloudEvent, CloudLink};
pub(crate) use methods::{Answer, Method};
use reported::StateReport;
use state::{Request, TwinState};
use store::Store;

/// The default `REPORTED_MIN_INTERVAL`: at most 1,440 reported patches a day.
pub const DEFAULT_REPORTED_MIN_INTERVAL: Duration = Duration::from_secs(60);

/// The control plane of one agent on IoT Hub.
#[derive(Debug)]
pub(crate) struct Control {
    state: TwinState,
    store: Store,
    max_fix_age: Duration,
    /// The link whose twin is ready, and its sender.
    cloud: Option<(u64, CloudLink)>,
}

impl Control {
    /// The control plane of an agent with the `local` cadence, keeping what it applies in
    /// `dir`.
    pub(crate) fn new(
        local: Cadence,
        remote: RemoteConfig,
        dir: &std::path::Path,
        min_interval: Duration,
        max_fix_age: Duration,
    ) -> Control {
        let store = Store::new(dir);
        let state = TwinState::new(local, remote, store.load(), min_interval);
        Control {
            state,
            store,
            max_fix_age,
            cloud: None,
        }
    }

    /// The cadence in effect.
    pub(crate) fn cadence(&self) -> Cadence {
        self.state.cadence()
    }

    /// The desired `$version` last applied or refused, if any.
    pub(crate) fn desired_version(&self) -> Option<u64> {
        self.state.stored().version
    }

    /// Link `link` is gone.
    pub(crate) fn link_down(&mut self, link: u64) {
        if self.cloud.as_ref().is_some_and(|(id, _)| *id == link) {
            self.cloud = None;
            self.state.disconnected();
        }
    }

    /// Applies an event of link `link` (not a method call: the agent answers those with
    /// [`Control::answer`]); the new cadence, if it changed.
    pub(crate) fn on_event(
        &mut self,
        link: u64,
        event: CloudEvent,
        now: Instant,
    ) -> Option<Cadence> {
        if let CloudEvent::Ready(cloud) = event {
            self.cloud = Some((link, cloud));
            self.state.connected(now);
            return None;
        }
        if self.cloud.as_ref().is_none_or(|(id, _)| *id != link) {
            return None;
        }
        let change = match event {
            CloudEvent::Ready(_) | CloudEvent::Method(_) => return None,
            CloudEvent::Twin(twin) => self.state.on_twin(&twin),
            CloudEvent::TwinRefused { status } => {
                tracing::warn!(
                    status,
                    "the hub refused to read the twin: the settings stay as they are"
                );
                self.state.twin_refused();
                return None;
            }
            CloudEvent::Desired(desired) => self.state.on_desired(&desired),
            CloudEvent::Reported { rid, status } => {
                self.state.on_reported(rid, status, now);
                return None;
            }
        };
        if change.save {
            self.store.save(self.state.stored());
        }
        if let Some(cadence) = change.cadence {
            tracing::info!(
                report_interval = ?cadence.report_interval(),
                publish_every = ?cadence.publish_interval(),
                "settings changed by the device twin"
            );
        }
        change.cadence
    }

    /// Answers method call `rid` on link `link`.
    pub(crate) fn answer(&self, link: u64, rid: &str, answer: &Answer) {
        if let Some((_, cloud)) = self.cloud.as_ref().filter(|(id, _)| *id == link) {
            cloud.respond(rid, answer.status, &answer.payload);
        }
    }

    /// Sends what is due at `now`, the agent's status being `status`.
    pub(crate) fn flush(&mut self, now: Instant, status: &AgentStatus) {
        let Some((_, cloud)) = &self.cloud else {
            return;
        };
        let report = StateReport::new(status, self.max_fix_age);
        match self.state.poll(now, &report) {
            None => {}
            Some(Request::ReadTwin) => {
                cloud.read_twin();
            }
            Some(Request::Patch(patch)) => {
                if let Some(rid) = cloud.patch_reported(&patch) {
                    self.state.patch_sent(rid);
                }
            }
        }
    }

    /// When after `now` [`Control::flush`] may have something to send.
    pub(crate) fn wake_at(&self, now: Instant) -> Option<Instant> {
        self.state.wake_at(now)
    }
}

//! The control plane's state: which desired `$version` is applied, which acknowledgements
//! the hub has not confirmed, what state was last reported and when the next report may go.
//! Pure (no I/O; time is passed in), driven by [`super::Control`].
//!
//! # Versions
//! - A whole twin (read after every connection) whose desired `$version` differs from the
//!   one applied is applied as a whole: newer, or older when the twin was made anew.
//! - A desired patch of the next version is applied; an older one is ignored; one that skips
//!   a version (a notification lost) makes the agent read the whole twin instead.
//!
//! # Reported patches
//! One at a time per link, QoS 0, confirmed by the hub's `204` answer. Acknowledgements go
//! at once; the agent's state when it changed ([`StateReport::same`]) and at most once per
//! `REPORTED_MIN_INTERVAL`, or along with acknowledgements. A patch the hub did not confirm
//! (link lost, no answer within [`ANSWER_TIMEOUT`], an error status) is sent again: at the
//! next link, after the timeout, or after [`RETRY_AFTER`]. Acknowledgements the twin
//! already holds (seen in the twin read at connect) are not sent again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::desired::{self, Ack, Overrides, Property};
use super::reported::StateReport;
use crate::cadence::Cadence;
use crate::cadence::RemoteConfig;
use crate::transport::Rid;

/// How long the hub may take to answer a twin request before the agent asks again.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long after an error answer the agent sends a reported patch again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(60);

/// What the agent keeps on disk: the desired version applied, its overrides and the
/// acknowledgements of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stored {
    /// The desired `$version` last applied.
    pub(crate) version: Option<u64>,
    /// The settings the twin overrides.
    pub(crate) overrides: Overrides,
    /// The acknowledgement of each property, as last decided.
    pub(crate) acks: BTreeMap<Property, Ack>,
}

/// What changed after desired properties, for the agent to act on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Change {
    /// The new cadence, if it changed.
    pub(crate) cadence: Option<Cadence>,
    /// Whether [`TwinState::stored`] changed and is to be saved.
    pub(crate) save: bool,
}

/// A request for the link.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    /// Read the whole twin.
    ReadTwin,
    /// Send this reported patch, then tell [`TwinState::patch_sent`] its request id.
    Patch(Value),
}

/// A reported patch awaiting the hub's answer.
#[derive(Debug)]
struct InFlight {
    /// `None` until [`TwinState::patch_sent`].
    rid: Option<Rid>,
    at: Instant,
    /// The acknowledgements it carries, by property, with their version.
    acks: BTreeMap<Property, u64>,
    state: Option<StateReport>,
}

/// The twin's state on one link.
#[derive(Debug, Default)]
struct LinkState {
    /// A twin read under way since then.
    reading: Option<Instant>,
    /// A patch skipped a version: read the whole twin.
    read_wanted: bool,
    /// The newest desired version seen in a patch.
    newest_seen: u64,
    in_flight: Option<InFlight>,
    /// No patch before then (after an error answer).
    hold_until: Option<Instant>,
}

/// The control plane's state of one agent.
#[derive(Debug)]
pub(crate) struct TwinState {
    local: Cadence,
    remote: RemoteConfig,
    stored: Stored,
    cadence: Cadence,
    /// Acknowledgements the hub has not confirmed.
    unconfirmed: BTreeSet<Property>,
    link: Option<LinkState>,
    confirmed_state: Option<StateReport>,
    state_sent_at: Option<Instant>,
    min_interval: Duration,
}

impl TwinState {
    /// The state of an agent whose local settings are `local`, having applied `stored`
    /// before (ignored with `REMOTE_CONFIG=off`), reporting its state at most once per
    /// `min_interval`.
    pub(crate) fn new(
        local: Cadence,
        remote: RemoteConfig,
        stored: Stored,
        min_interval: Duration,
    ) -> TwinState {
        let stored = match remote {
            RemoteConfig::On => stored,
            RemoteConfig::Off => Stored::default(),
        };
        let cadence = stored.overrides.cadence(local).unwrap_or_else(|err| {
            tracing::warn!(%err, "the settings kept from the twin do not fit the local ones: the local ones apply");
            local
        });
        TwinState {
            local,
            remote,
            // Confirmed again by the twin read at the next connection, or sent again.
            unconfirmed: stored.acks.keys().copied().collect(),
            stored,
            cadence,
            link: None,
            confirmed_state: None,
            state_sent_at: None,
            min_interval,
        }
    }

    /// The cadence in effect.
    pub(crate) fn cadence(&self) -> Cadence {
        self.cadence
    }

    /// What is kept on disk.
    pub(crate) fn stored(&self) -> &Stored {
        &self.stored
    }

    /// A link is ready and reading the twin since `now`.
    pub(crate) fn connected(&mut self, now: Instant) {
        self.link = Some(LinkState {
            reading: Some(now),
            ..LinkState::default()
        });
    }

    /// The link is gone: what it did not confirm is sent on the next one.
    pub(crate) fn disconnected(&mut self) {
        self.link = None;
    }

    /// The whole twin arrived.
    pub(crate) fn on_twin(&mut self, twin: &crate::transport::Twin) -> Change {
        let Some(link) = self.link.as_mut() else {
            return Change::default();
        };
        link.reading = None;
        if link.newest_seen > twin.desired.version {
            link.read_wanted = true;
        }
        let change = match self.stored.version {
            Some(version) if version == twin.desired.version => Change::default(),
            applied => {
                if applied.is_some_and(|v| v > twin.desired.version) {
                    tracing::info!(
                        applied,
                        twin = twin.desired.version,
                        "the twin's desired version is older than the one applied: the twin was made anew"
                    );
                }
                self.apply(&twin.desired.properties, twin.desired.version, true)
            }
        };
        // What the twin already holds need not be sent again.
        let acks = &self.stored.acks;
        self.unconfirmed.retain(|property| {
            let held = twin.reported.get(property.name());
            held != Some(&serde_json::to_value(&acks[property]).expect("an ack serializes"))
        });
        change
    }

    /// The twin could not be read.
    pub(crate) fn twin_refused(&mut self) {
        if let Some(link) = self.link.as_mut() {
            link.reading = None;
        }
    }

    /// A desired patch arrived.
    pub(crate) fn on_desired(&mut self, patch: &crate::transport::Desired) -> Change {
        let Some(link) = self.link.as_mut() else {
            return Change::default();
        };
        link.newest_seen = link.newest_seen.max(patch.version);
        match self.stored.version {
            Some(applied) if patch.version <= applied => Change::default(),
            // The read under way, or the one after it (`newest_seen`), covers it.
            _ if link.reading.is_some() => Change::default(),
            Some(applied) if patch.version == applied + 1 => {
                self.apply(&patch.properties, patch.version, false)
            }
            // A version skipped, or none applied yet: the whole twin says what holds.
            _ => {
                link.read_wanted = true;
                Change::default()
            }
        }
    }

    fn apply(&mut self, properties: &Map<String, Value>, version: u64, whole: bool) -> Change {
        let applied = desired::apply(
            self.local,
            self.stored.overrides,
            properties,
            version,
            whole,
            self.remote,
        );
        for (property, ack) in applied.acks {
            self.unconfirmed.insert(property);
            self.stored.acks.insert(property, ack);
        }
        self.stored.version = Some(version);
        self.stored.overrides = applied.overrides;
        let cadence = (applied.cadence != self.cadence).then_some(applied.cadence);
        self.cadence = applied.cadence;
        Change {
            cadence,
            save: self.remote == RemoteConfig::On,
        }
    }

    /// The hub answered reported patch `rid` with `status` at `now`.
    pub(crate) fn on_reported(&mut self, rid: Rid, status: u16, now: Instant) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        if link.in_flight.as_ref().and_then(|f| f.rid) != Some(rid) {
            return;
        }
        let in_flight = link.in_flight.take().expect("checked above");
        if !(200..300).contains(&status) {
            tracing::warn!(
                status,
                "the hub refused a reported patch: sending it again later"
            );
            link.hold_until = Some(now + RETRY_AFTER);
            return;
        }
        for (property, av) in in_flight.acks {
            if self.stored.acks.get(&property).is_some_and(|a| a.av == av) {
                self.unconfirmed.remove(&property);
            }
        }
        if let Some(state) = in_flight.state {
            self.confirmed_state = Some(state);
        }
    }

    /// What to send on the link at `now`, the agent's state being `state`.
    pub(crate) fn poll(&mut self, now: Instant, state: &StateReport) -> Option<Request> {
        let link = self.link.as_mut()?;
        if link.reading.is_some_and(|at| now >= at + ANSWER_TIMEOUT) {
            link.reading = None;
            link.read_wanted = true;
        }
        if link.read_wanted && link.reading.is_none() {
            link.read_wanted = false;
            link.reading = Some(now);
            return Some(Request::ReadTwin);
        }
        // The first patch waits for the twin read: it may confirm what was acknowledged.
        if link.reading.is_some() || link.hold_until.is_some_and(|until| now < until) {
            return None;
        }
        match &link.in_flight {
            Some(f) if f.rid.is_some() && now < f.at + ANSWER_TIMEOUT => return None,
            _ => link.in_flight = None,
        }
        let acks_due = !self.unconfirmed.is_empty();
        let changed = self
            .confirmed_state
            .as_ref()
            .is_none_or(|confirmed| !confirmed.same(state));
        let may_report = self
            .state_sent_at
            .is_none_or(|at| now >= at + self.min_interval);
        if !(acks_due || changed && may_report) {
            return None;
        }
        let mut patch = Map::new();
        let mut acks = BTreeMap::new();
        for property in &self.unconfirmed {
            let ack = &self.stored.acks[property];
            patch.insert(
                property.name().to_owned(),
                serde_json::to_value(ack).expect("an ack serializes"),
            );
            acks.insert(*property, ack.av);
        }
        // Along with acknowledgements the state costs nothing more: one message either way.
        if changed {
            state.write_into(&mut patch);
            self.state_sent_at = Some(now);
        }
        link.in_flight = Some(InFlight {
            rid: None,
            at: now,
            acks,
            state: changed.then(|| state.clone()),
        });
        Some(Request::Patch(Value::Object(patch)))
    }

    /// The patch of the last [`TwinState::poll`] went out as request `rid`.
    pub(crate) fn patch_sent(&mut self, rid: Rid) {
        if let Some(f) = self.link.as_mut().and_then(|l| l.in_flight.as_mut()) {
            f.rid = Some(rid);
        }
    }

    /// When after `now` [`TwinState::poll`] may have something to send without any event
    /// before.
    pub(crate) fn wake_at(&self, now: Instant) -> Option<Instant> {
        let link = self.link.as_ref()?;
        [
            link.reading.map(|at| at + ANSWER_TIMEOUT),
            link.in_flight.as_ref().map(|f| f.at + ANSWER_TIMEOUT),
            link.hold_until,
            self.state_sent_at.map(|at| at + self.min_interval),
        ]
        .into_iter()
        .flatten()
        .filter(|at| *at > now)
        .min()
    }
}

#[cfg(test)]
mod tests;

//! The agent's local status: counters and states every part updates, read through an
//! [`AgentHandle`] (in-process) or the optional status file (JSON, rewritten atomically
//! after every interval).

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cadence::{Cadence, RemoteConfig};
use crate::clock::ClockStatus;

/// The state of the MQTT connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionState {
    /// Trying to connect.
    #[default]
    Connecting,
    /// Connected; messages flow.
    Connected,
    /// Waiting out a backoff delay before the next attempt.
    Backoff,
    /// Stopped (the agent shut down).
    Stopped,
}

/// Messages dropped on purpose, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Dropped {
    /// Unacknowledged messages deleted because the buffer was full (oldest first).
    pub buffer_full: u64,
    /// Buffered records skipped because their checksum was wrong.
    pub corrupt: u64,
    /// Fixes that could not be encoded as a valid message (e.g. out-of-range values).
    pub invalid: u64,
    /// Messages lost because the buffer could not be written (e.g. a full disk) and no
    /// link acknowledged them from memory.
    pub write_failed: u64,
}

/// What the MAVLink source has seen on its link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MavlinkStatus {
    /// The vehicle whose positions are published, once chosen.
    pub vehicle: Option<Vehicle>,
    /// The MAVLink version the vehicle speaks, once chosen.
    pub version: Option<MavlinkVersion>,
    /// Messages from other systems (other vehicles, ground stations), ignored.
    pub ignored_other_systems: u64,
    /// Frames that could not be read (bad checksum, bad header, stray bytes).
    pub unreadable: u64,
    /// Well-formed frames of messages outside the common message set, ignored.
    pub unknown_messages: u64,
    /// `HEARTBEAT`s the agent sent as an onboard controller.
    pub heartbeats_sent: u64,
    /// Frames refused for their signature, by reason; `None` when frames are not checked
    /// (no `MAVLINK_SIGNING_KEY_FILE`).
    pub refused: Option<RefusedFrames>,
}

/// MAVLink frames refused because they are not signed with the link's key, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RefusedFrames {
    /// Unsigned frames (MAVLink 1 included).
    pub unsigned: u64,
    /// Frames signed with another key, or altered.
    pub bad_signature: u64,
    /// Frames signed with the key whose timestamp is not newer than their stream's last
    /// (replayed), or more than a minute behind the newest known.
    pub old_timestamp: u64,
}

/// A MAVLink system and component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Vehicle {
    /// The system id.
    pub system_id: u8,
    /// The autopilot's component id.
    pub component_id: u8,
}

/// A MAVLink wire version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MavlinkVersion {
    /// MAVLink 1 (`0xFE` frames).
    V1,
    /// MAVLink 2 (`0xFD` frames).
    V2,
}

impl std::fmt::Display for MavlinkVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MavlinkVersion::V1 => "MAVLink 1",
            MavlinkVersion::V2 => "MAVLink 2",
        })
    }
}

/// The kind of position source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// The flight stack over MAVLink.
    Mavlink,
    /// gpsd.
    Gpsd,
    /// The simulator.
    Sim,
}

/// The sampling and publishing settings in effect, and where they come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SettingsStatus {
    /// Time between samples, milliseconds.
    pub report_interval_ms: u64,
    /// Time between publishes, milliseconds (the report interval when every sample goes
    /// alone).
    pub publish_every_ms: u64,
    /// Whether the device twin may change them (`REMOTE_CONFIG`).
    pub remote_config: RemoteConfig,
    /// The desired properties' `$version` last applied or refused, if any.
    pub desired_version: Option<u64>,
}

impl SettingsStatus {
    /// The settings of `cadence`.
    pub(crate) fn new(
        cadence: Cadence,
        remote_config: RemoteConfig,
        desired_version: Option<u64>,
    ) -> SettingsStatus {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        SettingsStatus {
            report_interval_ms: millis(cadence.report_interval()),
            publish_every_ms: millis(cadence.publish_interval()),
            remote_config,
            desired_version,
        }
    }
}

/// A snapshot of the agent's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentStatus {
    /// The device id.
    pub device_id: String,
    /// The agent's version.
    pub version: &'static str,
    /// The kind of position source.
    pub source: Option<SourceKind>,
    /// The sampling and publishing settings in effect.
    pub settings: SettingsStatus,
    /// The connection state.
    pub connection: ConnectionState,
    /// Milliseconds since the last fix arrived, if any arrived.
    pub last_fix_age_ms: Option<u64>,
    /// Messages in the buffer waiting for acknowledgement.
    pub buffer_depth: u64,
    /// Bytes of the buffer on disk.
    pub buffer_bytes: u64,
    /// Age of the oldest message waiting for acknowledgement (by its position's time),
    /// milliseconds.
    pub oldest_unsent_age_ms: Option<u64>,
    /// Messages made (one per interval with a fix).
    pub generated: u64,
    /// Messages the disk buffer refused (a full disk, an I/O error): published from
    /// memory only. Those not acknowledged before their link ended are lost and also
    /// counted in `dropped.write_failed`.
    pub unbuffered: u64,
    /// Publishes handed to the broker connection (resends included).
    pub sent: u64,
    /// Publishes the broker acknowledged (PUBACK).
    pub acked: u64,
    /// Messages dropped, by reason.
    pub dropped: Dropped,
    /// Intervals without a usable fix (no message made).
    pub no_fix: u64,
    /// Intervals with a fix but no time the agent can vouch for (the board clock before
    /// any plausible date and no GPS time yet): no message made.
    pub no_time: u64,
    /// Which clock stamps positions, and how far the board clock is off GPS time.
    pub clock: ClockStatus,
    /// The MAVLink link, when the source is MAVLink.
    pub mavlink: Option<MavlinkStatus>,
    /// Connection attempts so far.
    pub connect_attempts: u64,
    /// Successful connections so far (reconnects and token renewals included).
    pub connections: u64,
    /// Restarts of the position source after a failure.
    pub source_restarts: u64,
    /// The `seq` the next message gets.
    pub next_seq: u64,
    /// The last error of the connection or the source, for the operator.
    pub last_error: Option<String>,
    /// When the last fix arrived (turned into `last_fix_age_ms` in snapshots).
    #[serde(skip)]
    last_fix_at: Option<Instant>,
}

/// The writable side of the status, shared by the agent's tasks.
#[derive(Debug, Clone)]
pub(crate) struct StatusCell {
    tx: watch::Sender<AgentStatus>,
}

impl StatusCell {
    pub(crate) fn new(device_id: &str) -> StatusCell {
        let (tx, _) = watch::channel(AgentStatus {
            device_id: device_id.to_owned(),
            version: env!("CARGO_PKG_VERSION"),
            ..AgentStatus::default()
        });
        StatusCell { tx }
    }

    /// Applies `change` and wakes whoever waits on the status.
    pub(crate) fn update(&self, change: impl FnOnce(&mut AgentStatus)) {
        self.tx.send_modify(change);
    }

    pub(crate) fn fix_arrived(&self, at: Instant) {
        self.update(|s| s.last_fix_at = Some(at));
    }

    pub(crate) fn handle(&self) -> AgentHandle {
        AgentHandle {
            rx: self.tx.subscribe(),
        }
    }
}

/// A read-only view of a running agent's status; cheap to clone.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    rx: watch::Receiver<AgentStatus>,
}

impl AgentHandle {
    /// The current status.
    pub fn status(&self) -> AgentStatus {
        snapshot(&self.rx.borrow())
    }

    /// Waits until `ready` holds for the status, at most `timeout`; returns the status
    /// that satisfied it, or the last one seen on timeout as the error.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut ready: impl FnMut(&AgentStatus) -> bool,
    ) -> Result<AgentStatus, AgentStatus> {
        let mut rx = self.rx.clone();
        let waited = tokio::time::timeout(timeout, rx.wait_for(|s| ready(&snapshot(s)))).await;
        match waited {
            Ok(Ok(status)) => Ok(snapshot(&status)),
            _ => Err(self.status()),
        }
    }
}

fn snapshot(status: &AgentStatus) -> AgentStatus {
    let mut status = status.clone();
    status.last_fix_age_ms = status
        .last_fix_at
        .map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX));
    status
}

/// Writes `status` as JSON to `path` atomically (temporary file, then rename).
pub fn write_status_file(path: &Path, status: &AgentStatus) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(status).map_err(std::io::Error::other)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, path)
}

//! The agent's own state in the twin's reported properties: version, position source,
//! buffer, connection and settings in effect, taken from its [`AgentStatus`].
//!
//! A report goes when something an operator acts on changed ([`StateReport::same`]): the
//! source, its fix, the clock that stamps positions, the last error, the settings, or the
//! buffer by an order of magnitude (depth 0-9, 10-99, ...; oldest unsent under a minute,
//! ten minutes, an hour, or older). Counters that move with every message (the exact depth,
//! the number of connections) go along when a report goes, but do not make one. A patch is
//! well under IoT Hub's 4 KB metering chunk (the last error is cut to
//! [`LAST_ERROR_MAX`] characters): one message each.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use super::desired::seconds_value;
use crate::cadence::RemoteConfig;
use crate::clock::ClockSource;
use crate::status::{AgentStatus, SourceKind};

/// The longest last error reported, in characters.
pub(crate) const LAST_ERROR_MAX: usize = 200;

/// The reported state of one agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StateReport {
    agent: AgentPart,
    source: SourcePart,
    buffer: BufferPart,
    connection: ConnectionPart,
    settings: SettingsPart,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
struct AgentPart {
    version: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct SourcePart {
    kind: Option<SourceKind>,
    /// The MAVLink vehicle's system id.
    system_id: Option<u8>,
    fix: bool,
    /// The clock that stamped the last position.
    clock: Option<ClockSource>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct BufferPart {
    depth: u64,
    oldest_unsent_s: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConnectionPart {
    connections: u64,
    last_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct SettingsPart {
    report_interval: Value,
    publish_every: Value,
    remote_config: RemoteConfig,
    desired_version: Option<u64>,
}

impl StateReport {
    /// The state of an agent whose status is `status`; a fix older than `max_fix_age` is no
    /// fix.
    pub(crate) fn new(status: &AgentStatus, max_fix_age: Duration) -> StateReport {
        let fix = status
            .last_fix_age_ms
            .is_some_and(|age| u128::from(age) <= max_fix_age.as_millis());
        let last_error = status.last_error.as_ref().map(|error| {
            match error.char_indices().nth(LAST_ERROR_MAX) {
                Some((end, _)) => format!("{}...", &error[..end]),
                None => error.clone(),
            }
        });
        StateReport {
            agent: AgentPart {
                version: status.version,
            },
            source: SourcePart {
                kind: status.source,
                system_id: status
                    .mavlink
                    .and_then(|m| m.vehicle)
                    .map(|vehicle| vehicle.system_id),
                fix,
                clock: status.clock.last,
            },
            buffer: BufferPart {
                depth: status.buffer_depth,
                oldest_unsent_s: status.oldest_unsent_age_ms.map(|ms| ms / 1000),
            },
            connection: ConnectionPart {
                connections: status.connections,
                last_error,
            },
            settings: SettingsPart {
                report_interval: seconds_value(Duration::from_millis(
                    status.settings.report_interval_ms,
                )),
                publish_every: seconds_value(Duration::from_millis(
                    status.settings.publish_every_ms,
                )),
                remote_config: status.settings.remote_config,
                desired_version: status.settings.desired_version,
            },
        }
    }

    /// Whether `other` says nothing an operator acts on that this does not.
    pub(crate) fn same(&self, other: &StateReport) -> bool {
        self.agent == other.agent
            && self.source == other.source
            && self.settings == other.settings
            && self.connection.last_error == other.connection.last_error
            && magnitude(self.buffer.depth) == magnitude(other.buffer.depth)
            && age_band(self.buffer.oldest_unsent_s) == age_band(other.buffer.oldest_unsent_s)
    }

    /// Puts this state into a reported patch.
    pub(crate) fn write_into(&self, patch: &mut Map<String, Value>) {
        if let Value::Object(parts) = serde_json::to_value(self).expect("a report serializes") {
            patch.extend(parts);
        }
    }
}

/// 0 for 0-9, 1 for 10-99, ...
fn magnitude(depth: u64) -> u32 {
    depth.checked_ilog10().unwrap_or(0)
}

/// Under a minute (or none), ten minutes, an hour, or older.
fn age_band(age_s: Option<u64>) -> u8 {
    match age_s.unwrap_or(0) {
        0..60 => 0,
        60..600 => 1,
        600..3600 => 2,
        _ => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{MavlinkStatus, SettingsStatus, Vehicle};

    fn status() -> AgentStatus {
        // A struct literal cannot name the status's private fields.
        let mut status = AgentStatus::default();
        status.version = "1.2.3";
        status.source = Some(SourceKind::Mavlink);
        status.mavlink = Some(MavlinkStatus {
            vehicle: Some(Vehicle {
                system_id: 1,
                component_id: 1,
            }),
            ..MavlinkStatus::default()
        });
        status.last_fix_age_ms = Some(300);
        status.buffer_depth = 1;
        status.settings = SettingsStatus {
            report_interval_ms: 5000,
            publish_every_ms: 500,
            remote_config: RemoteConfig::On,
            desired_version: Some(4),
        };
        status
    }

    #[test]
    fn the_report_names_version_source_and_settings() {
        let mut patch = Map::new();
        StateReport::new(&status(), Duration::from_secs(10)).write_into(&mut patch);
        assert_eq!(
            Value::Object(patch),
            serde_json::json!({
                "agent": {"version": "1.2.3"},
                "source": {"kind": "mavlink", "systemId": 1, "fix": true, "clock": null},
                "buffer": {"depth": 1, "oldestUnsentS": null},
                "connection": {"connections": 0, "lastError": null},
                "settings": {"reportInterval": 5, "publishEvery": 0.5, "remoteConfig": "on", "desiredVersion": 4}
            })
        );
    }

    #[test]
    fn only_what_an_operator_acts_on_makes_a_report() {
        let max_age = Duration::from_secs(10);
        let base = StateReport::new(&status(), max_age);
        let mut busy = status();
        busy.buffer_depth = 7;
        busy.connections = 30;
        busy.oldest_unsent_age_ms = Some(20_000);
        assert!(base.same(&StateReport::new(&busy, max_age)));
        let changes: [fn(&mut AgentStatus); 6] = [
            |s: &mut AgentStatus| s.buffer_depth = 10,
            |s: &mut AgentStatus| s.oldest_unsent_age_ms = Some(61_000),
            |s: &mut AgentStatus| s.last_fix_age_ms = Some(10_001),
            |s: &mut AgentStatus| s.last_error = Some("mqtt: refused".into()),
            |s: &mut AgentStatus| s.settings.report_interval_ms = 1000,
            |s: &mut AgentStatus| s.clock.last = Some(ClockSource::Gps),
        ];
        for change in changes {
            let mut changed = status();
            change(&mut changed);
            assert!(!base.same(&StateReport::new(&changed, max_age)));
        }
    }

    #[test]
    fn the_largest_patch_is_well_under_one_4_kb_message() {
        let mut worst = status();
        worst.last_error = Some("é".repeat(10_000));
        worst.buffer_depth = u64::MAX;
        worst.connections = u64::MAX;
        worst.oldest_unsent_age_ms = Some(u64::MAX);
        worst.settings.desired_version = Some(u64::MAX);
        worst.settings.report_interval_ms = 86_399_999;
        worst.settings.publish_every_ms = 86_399_999;
        let mut patch = Map::new();
        StateReport::new(&worst, Duration::from_secs(1)).write_into(&mut patch);
        // With the acknowledgements of both settings, each quoting a refused value.
        for name in ["reportInterval", "publishEvery"] {
            let ack = super::super::desired::Ack {
                value: serde_json::json!(86399.999),
                ac: 400,
                av: u64::MAX,
                ad: format!(
                    "{}... refused: not a number of seconds; keeping 86399.999",
                    "x".repeat(40)
                ),
            };
            patch.insert(name.into(), serde_json::to_value(ack).unwrap());
        }
        let bytes = Value::Object(patch).to_string().len();
        assert!(bytes < 2048, "{bytes} bytes");
    }
}

//! Judging the events IoT Hub routes besides positions: a device connection state event
//! becomes the fact "connected/disconnected at, in the order of `sequenceNumber`", a twin
//! change event that carries the reported `agent.version` becomes the fact "runs this
//! version, as of twin version `version`". Pure; no I/O. The schemas are Microsoft's
//! ("IoT Hub non-telemetry event schemas").

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::validate::Rejection;
use crate::source::{Ack, HubEvent, MessageKind};

/// Longest `sequenceNumber` taken: Microsoft's is 64 hexadecimal digits (a 256-bit number).
const MAX_SEQUENCE_DIGITS: usize = 64;
/// Longest reported agent version stored.
const MAX_VERSION_CHARS: usize = 64;

/// The operation of a connection state event (`opType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionOp {
    /// `deviceConnected`.
    Connected,
    /// `deviceDisconnected`.
    Disconnected,
}

/// The operation of a twin change event (`opType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwinOp {
    /// `updateTwin`: the body holds the changed properties.
    Update,
    /// `replaceTwin`: the body holds the whole twin.
    Replace,
}

/// What an event tells of a drone's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentFact {
    /// It connected or disconnected.
    Connection {
        /// Which.
        op: ConnectionOp,
        /// When (`operationTimestamp`).
        at: DateTime<Utc>,
        /// The event's `sequenceNumber`: hexadecimal digits of a fixed width that sort as
        /// strings in the order of the events.
        sequence: String,
    },
    /// It reports running `version` (reported `agent.version`) in twin version `twin_version`.
    Version {
        /// Whether the twin was updated or replaced.
        op: TwinOp,
        /// The twin's `version`, which grows with every change of the twin.
        twin_version: u64,
        /// The agent's version.
        version: String,
    },
}

/// A fact on its way to the sink, with its message's acknowledgement.
#[derive(Debug)]
pub struct AgentWrite {
    /// The drone (the hub's `iothub-connection-device-id`).
    pub device_id: String,
    /// The fact.
    pub fact: AgentFact,
    /// Acknowledges the message once the write is final.
    pub ack: Ack,
}

/// The body of a connection state event.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConnectionBody {
    sequence_number: String,
}

/// What the writer reads of a twin change event's body.
#[derive(Deserialize)]
struct TwinBody {
    version: u64,
    #[serde(default)]
    properties: TwinProperties,
}

#[derive(Deserialize, Default)]
struct TwinProperties {
    #[serde(default)]
    reported: Option<Reported>,
}

#[derive(Deserialize)]
struct Reported {
    #[serde(default)]
    agent: Option<ReportedAgent>,
}

#[derive(Deserialize)]
struct ReportedAgent {
    #[serde(default)]
    version: Option<String>,
}

/// Judges a message that is not telemetry: the fact it carries, `Ok(None)` for a twin
/// change that does not touch the agent's version (final: nothing to store), or why it is
/// rejected (an unsupported source or a module's event; a malformed event).
pub fn judge(kind: &MessageKind, payload: &[u8]) -> Result<Option<AgentFact>, Rejection> {
    match kind {
        MessageKind::Telemetry => unreachable!("positions are judged by validate"),
        MessageKind::Other(source) => Err(Rejection::Unsupported(format!(
            "message source {source:?} is not stored"
        ))),
        MessageKind::ConnectionState(event) => connection(event, payload).map(Some),
        MessageKind::TwinChange(event) => twin(event, payload),
    }
}

fn bad(detail: impl Into<String>) -> Rejection {
    Rejection::BadEvent(detail.into())
}

/// Rejects a module's event: the drone's agent is the device itself.
fn device_only(event: &HubEvent) -> Result<(), Rejection> {
    match &event.module_id {
        Some(module) => Err(Rejection::Unsupported(format!(
            "event of module {module:?}, not of the device"
        ))),
        None => Ok(()),
    }
}

fn connection(event: &HubEvent, payload: &[u8]) -> Result<AgentFact, Rejection> {
    device_only(event)?;
    let op = match event.op_type.as_deref() {
        Some("deviceConnected") => ConnectionOp::Connected,
        Some("deviceDisconnected") => ConnectionOp::Disconnected,
        other => return Err(bad(format!("connection state opType {other:?}"))),
    };
    let at = event
        .operation_timestamp
        .as_deref()
        .ok_or_else(|| bad("connection state event without operationTimestamp"))?;
    let at = DateTime::parse_from_rfc3339(at)
        .map_err(|e| bad(format!("operationTimestamp {at:?}: {e}")))?
        .with_timezone(&Utc);
    let body: ConnectionBody =
        serde_json::from_slice(payload).map_err(|e| bad(format!("connection state body: {e}")))?;
    let sequence = body.sequence_number;
    if sequence.is_empty()
        || sequence.len() > MAX_SEQUENCE_DIGITS
        || !sequence.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(bad(format!(
            "sequenceNumber {sequence:?} is not up to {MAX_SEQUENCE_DIGITS} hexadecimal digits"
        )));
    }
    Ok(AgentFact::Connection { op, at, sequence })
}

fn twin(event: &HubEvent, payload: &[u8]) -> Result<Option<AgentFact>, Rejection> {
    device_only(event)?;
    let op = match event.op_type.as_deref() {
        Some("updateTwin") => TwinOp::Update,
        Some("replaceTwin") => TwinOp::Replace,
        other => return Err(bad(format!("twin change opType {other:?}"))),
    };
    let body: TwinBody =
        serde_json::from_slice(payload).map_err(|e| bad(format!("twin change body: {e}")))?;
    let version = body
        .properties
        .reported
        .and_then(|r| r.agent)
        .and_then(|a| a.version);
    match version {
        None => Ok(None),
        Some(version) if version.is_empty() || version.chars().count() > MAX_VERSION_CHARS => {
            Err(bad(format!(
                "agent.version {version:?} is empty or longer than {MAX_VERSION_CHARS}"
            )))
        }
        Some(version) => Ok(Some(AgentFact::Version {
            op,
            twin_version: body.version,
            version,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::DropReason;

    fn event(op: &str) -> HubEvent {
        HubEvent {
            op_type: Some(op.into()),
            operation_timestamp: Some("2022-06-01T18:43:04.5561024Z".into()),
            module_id: None,
        }
    }

    #[test]
    fn a_connection_state_event_as_documented_is_a_fact() {
        // Body and properties of the example in "IoT Hub non-telemetry event schemas".
        let body = br#"{"sequenceNumber":"000000000000000001D8713FF7E0851400000002000000000000000000000007"}"#;
        let kind = MessageKind::ConnectionState(Box::new(event("deviceDisconnected")));
        let fact = judge(&kind, body).unwrap().unwrap();
        assert_eq!(
            fact,
            AgentFact::Connection {
                op: ConnectionOp::Disconnected,
                at: "2022-06-01T18:43:04.556102400Z".parse().unwrap(),
                sequence: "000000000000000001D8713FF7E0851400000002000000000000000000000007".into(),
            }
        );
    }

    #[test]
    fn a_twin_change_carries_the_version_only_when_reported() {
        let kind = MessageKind::TwinChange(Box::new(event("updateTwin")));
        let reported = br#"{"version":9,"properties":{"reported":{"agent":{"version":"0.1.0"},"$version":4}}}"#;
        assert_eq!(
            judge(&kind, reported).unwrap(),
            Some(AgentFact::Version {
                op: TwinOp::Update,
                twin_version: 9,
                version: "0.1.0".into()
            })
        );
        // The documented example: a desired property and a tag changed.
        let desired = br#"{"version":7,"tags":{"tag1":"new value"},"properties":{"desired":{"property1":"new value","$version":6}}}"#;
        assert_eq!(judge(&kind, desired).unwrap(), None);
    }

    #[test]
    fn unsupported_and_malformed_events_have_their_reasons() {
        let seq = br#"{"sequenceNumber":"0A"}"#;
        let mut module = event("deviceConnected");
        module.module_id = Some("m1".into());
        let cases: [(MessageKind, &[u8], DropReason); 6] = [
            (
                MessageKind::Other("deviceLifecycleEvents".into()),
                b"{}",
                DropReason::UnsupportedEvent,
            ),
            (
                MessageKind::ConnectionState(Box::new(module)),
                seq,
                DropReason::UnsupportedEvent,
            ),
            (
                MessageKind::ConnectionState(Box::new(event("deviceRebooted"))),
                seq,
                DropReason::InvalidEvent,
            ),
            (
                MessageKind::ConnectionState(Box::new(event("deviceConnected"))),
                br#"{"sequenceNumber":"0A' OR 1=1"}"#,
                DropReason::InvalidEvent,
            ),
            (
                MessageKind::ConnectionState(Box::new(HubEvent {
                    operation_timestamp: None,
                    ..event("deviceConnected")
                })),
                seq,
                DropReason::InvalidEvent,
            ),
            (
                MessageKind::TwinChange(Box::new(event("updateTwin"))),
                br#"{"properties":{}}"#,
                DropReason::InvalidEvent,
            ),
        ];
        for (kind, body, reason) in cases {
            let err = judge(&kind, body).unwrap_err();
            assert_eq!(err.reason(), reason, "{kind:?}: {err:?}");
        }
    }
}

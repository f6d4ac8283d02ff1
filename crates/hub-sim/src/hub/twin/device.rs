//! The device side of twins and methods over MQTT: what a device publishes on `$iothub/...`
//! (read the twin, patch reported properties, answer a method) and what it is answered.
//! These publishes never reach the partitions.

use super::Outbound;
use super::events::TwinOp;
use super::store::TwinError;
use crate::hub::{Hub, Subscription};
use bytes::Bytes;

/// The longest request id taken (the SDKs send UUIDs or small counters).
pub const MAX_RID: usize = 128;

/// A device's request on a `$iothub/` topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRequest {
    /// `$iothub/twin/GET/?$rid={rid}`.
    GetTwin {
        /// Request id.
        rid: String,
    },
    /// `$iothub/twin/PATCH/properties/reported/?$rid={rid}`.
    PatchReported {
        /// Request id.
        rid: String,
    },
    /// `$iothub/methods/res/{status}/?$rid={rid}`.
    MethodResponse {
        /// The status the device answers with.
        status: i32,
        /// The request id of the method request.
        rid: String,
    },
}

/// Why a `$iothub/` publish is refused (the connection is closed, as IoT Hub does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Not a twin or method topic a device may publish to.
    #[error("not a twin or method topic")]
    Topic,
    /// No `$rid`, one longer than [`MAX_RID`], or one with `#`, `+`, `/` or blanks.
    #[error("no $rid, or one over {MAX_RID} bytes or with # + / or blanks")]
    Rid,
}

impl RequestError {
    /// The label counted under `connections_refused`.
    pub fn reason(self) -> &'static str {
        match self {
            RequestError::Topic => "topic",
            RequestError::Rid => "bad_rid",
        }
    }
}

fn rid_of(query: &str) -> Result<String, RequestError> {
    let query = query.strip_prefix('?').ok_or(RequestError::Rid)?;
    let rid = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("$rid="))
        .ok_or(RequestError::Rid)?;
    // The rid goes back into a topic name: no wildcards, separators or control characters.
    let bad = |c: char| "#+/".contains(c) || c.is_control() || c.is_whitespace();
    if rid.is_empty() || rid.len() > MAX_RID || rid.chars().any(bad) {
        return Err(RequestError::Rid);
    }
    Ok(rid.to_owned())
}

/// Parses a publish topic under `$iothub/`.
pub fn parse(topic: &str) -> Result<DeviceRequest, RequestError> {
    if let Some(query) = topic.strip_prefix("$iothub/twin/GET/") {
        return Ok(DeviceRequest::GetTwin {
            rid: rid_of(query)?,
        });
    }
    if let Some(query) = topic.strip_prefix("$iothub/twin/PATCH/properties/reported/") {
        return Ok(DeviceRequest::PatchReported {
            rid: rid_of(query)?,
        });
    }
    if let Some(rest) = topic.strip_prefix("$iothub/methods/res/") {
        let (status, query) = rest.split_once('/').ok_or(RequestError::Topic)?;
        let status = status.parse().map_err(|_| RequestError::Topic)?;
        return Ok(DeviceRequest::MethodResponse {
            status,
            rid: rid_of(query)?,
        });
    }
    Err(RequestError::Topic)
}

/// The topic of an answer to a twin request.
fn twin_answer(status: u16, rid: &str, version: Option<u64>) -> String {
    match version {
        Some(v) => format!("$iothub/twin/res/{status}/?$rid={rid}&$version={v}"),
        None => format!("$iothub/twin/res/{status}/?$rid={rid}"),
    }
}

/// Serves a device's `$iothub/` publish; returns the answer to send it, if any.
pub(crate) fn handle(
    hub: &Hub,
    device: &str,
    topic: &str,
    payload: Bytes,
) -> Result<Option<Outbound>, RequestError> {
    let answer = |topic: String, payload: Bytes| Some(Outbound { topic, payload });
    match parse(topic)? {
        DeviceRequest::GetTwin { rid } => {
            hub.counters.add("twin_operations", "get", 1);
            let twin = hub.twins.device_view(device);
            let body = serde_json::to_vec(&twin).expect("JSON");
            Ok(answer(twin_answer(200, &rid, None), body.into()))
        }
        DeviceRequest::PatchReported { rid } => {
            let patch = serde_json::from_slice(&payload);
            let changed = match patch {
                Ok(patch) => hub.twins.patch_reported(device, &patch),
                Err(_) => Err(TwinError::NotAnObject),
            };
            match changed {
                Ok(change) => {
                    hub.counters.add("twin_operations", "patch_reported", 1);
                    hub.events.twin_changed(
                        &hub.partitions,
                        device,
                        TwinOp::Update,
                        change.event_body,
                    );
                    let topic = twin_answer(204, &rid, Some(change.reported_version));
                    Ok(answer(topic, Bytes::new()))
                }
                Err(e) => {
                    hub.counters.add("twin_operations_refused", "reported", 1);
                    tracing::info!(device, error = %e, "reported patch refused");
                    let status = match e {
                        TwinError::State(_) => 500,
                        _ => 400,
                    };
                    Ok(answer(twin_answer(status, &rid, None), Bytes::new()))
                }
            }
        }
        DeviceRequest::MethodResponse { status, rid } => {
            if !hub.methods.complete(device, &rid, status, payload) {
                tracing::debug!(device, rid, "a method answer nobody waits for");
            }
            Ok(None)
        }
    }
}

/// Sends a desired property notification to `device` if it is connected and subscribed.
pub(crate) fn notify_desired(hub: &Hub, device: &str, notification: &serde_json::Value) {
    let Some((_, outbound)) = hub.sessions.subscriber(device, Subscription::Desired) else {
        return;
    };
    let version = notification["$version"].as_u64().unwrap_or_default();
    let message = Outbound {
        topic: format!("$iothub/twin/PATCH/properties/desired/?$version={version}"),
        payload: serde_json::to_vec(notification).expect("JSON").into(),
    };
    hub.sessions.push(device, &outbound, message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twin_and_method_topics_parse_with_bounded_rids() {
        assert_eq!(
            parse("$iothub/twin/GET/?$rid=1"),
            Ok(DeviceRequest::GetTwin { rid: "1".into() })
        );
        assert_eq!(
            parse("$iothub/twin/PATCH/properties/reported/?$rid=ab&x=1"),
            Ok(DeviceRequest::PatchReported { rid: "ab".into() })
        );
        assert_eq!(
            parse("$iothub/methods/res/200/?$rid=7"),
            Ok(DeviceRequest::MethodResponse {
                status: 200,
                rid: "7".into()
            })
        );
        assert_eq!(parse("$iothub/twin/GET/"), Err(RequestError::Rid));
        let long = format!("$iothub/twin/GET/?$rid={}", "r".repeat(MAX_RID + 1));
        assert_eq!(parse(&long), Err(RequestError::Rid));
        for bad in ["#", "a+b", "a/b", "a b"] {
            let topic = format!("$iothub/twin/GET/?$rid={bad}");
            assert_eq!(parse(&topic), Err(RequestError::Rid), "{bad}");
        }
        assert_eq!(
            parse("$iothub/twin/PATCH/properties/desired/?$rid=1"),
            Err(RequestError::Topic)
        );
        assert_eq!(
            parse("$iothub/methods/res/ok/?$rid=1"),
            Err(RequestError::Topic)
        );
        assert_eq!(parse("$iothub/other"), Err(RequestError::Topic));
    }
}

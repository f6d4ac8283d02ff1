//! Direct methods: a call waits (up to its connect timeout) for the device to be connected
//! and subscribed to `$iothub/methods/POST/#`, is sent on
//! `$iothub/methods/POST/{name}/?$rid={rid}`, and waits (up to its response timeout) for the
//! device's publish on `$iothub/methods/res/{status}/?$rid={rid}`; a call whose session
//! closes first ends at once. Calls pending per device,
//! payloads, method names and timeouts are bounded as IoT Hub bounds them.

use super::Outbound;
use crate::hub::{Hub, Subscription};
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::oneshot;

/// IoT Hub's limit on a method's request and response payloads.
pub const MAX_METHOD_PAYLOAD: usize = 128 * 1024;
/// Calls waiting for one device's answers at once; more are refused (429).
pub const MAX_PENDING_PER_DEVICE: usize = 16;
/// The longest response or connect timeout IoT Hub takes.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest method name taken.
const MAX_NAME: usize = 128;

/// How long a call waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodTimeouts {
    /// For the device's answer once the request is sent (`responseTimeoutInSeconds`, IoT
    /// Hub's default 30 s).
    pub response: Duration,
    /// For the device to connect (`connectTimeoutInSeconds`, default 0: it must be online).
    pub connect: Duration,
}

impl Default for MethodTimeouts {
    fn default() -> Self {
        MethodTimeouts {
            response: Duration::from_secs(30),
            connect: Duration::ZERO,
        }
    }
}

/// A device's answer to a method.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodResponse {
    /// The status the device answered with.
    pub status: i32,
    /// Its JSON payload (`null` when empty).
    pub payload: Value,
}

/// Why a call got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MethodError {
    /// The device is not registered (404001).
    #[error("device not found")]
    DeviceNotFound,
    /// The device was not connected and subscribed within the connect timeout (404103).
    #[error("Timed out waiting for device to connect.")]
    DeviceNotOnline(Duration),
    /// The device did not answer within the response timeout (504101).
    #[error("Timed out waiting for the response from device.")]
    GatewayTimeout(Duration),
    /// The device's connection ended before it answered (404104).
    #[error("The device's connection closed before it answered.")]
    DeviceConnectionClosed,
    /// Too many calls wait for this device already (429001).
    #[error("too many method calls are pending for this device")]
    Throttled,
    /// The request is not valid (400004): name, payload size or timeouts.
    #[error("{0}")]
    BadRequest(String),
    /// The device answered with a payload that is not JSON, or over 128 KB (400).
    #[error("the device's response payload is not JSON or is over 128 KB")]
    BadDeviceResponse,
}

/// A call waiting for its answer, with the id of the session its request went to.
type Waiter = (u64, oneshot::Sender<(i32, Bytes)>);

/// The calls waiting for devices' answers, by device and request id.
#[derive(Debug, Default)]
pub(crate) struct Methods {
    pending: Mutex<HashMap<String, HashMap<String, Waiter>>>,
    next_rid: AtomicU64,
}

/// Removes a call's entry however the call ends.
struct Pending<'a> {
    methods: &'a Methods,
    device: &'a str,
    rid: String,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut pending = self.methods.pending.lock();
        if let Some(calls) = pending.get_mut(self.device) {
            calls.remove(&self.rid);
            if calls.is_empty() {
                pending.remove(self.device);
            }
        }
    }
}

fn check_name(name: &str) -> Result<(), MethodError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.chars().any(|c| "/#+?$".contains(c) || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(MethodError::BadRequest(format!(
            "method name `{name}`: 1 to {MAX_NAME} characters, none of / # + ? $"
        )))
    }
}

impl Methods {
    /// Hands the device's answer to the call waiting for `rid`; whether one was.
    pub(crate) fn complete(&self, device: &str, rid: &str, status: i32, payload: Bytes) -> bool {
        let waiter = self
            .pending
            .lock()
            .get_mut(device)
            .and_then(|calls| calls.remove(rid));
        waiter.is_some_and(|(_, w)| w.send((status, payload)).is_ok())
    }

    /// Ends the calls whose requests went to session `session` of `device`, which closed.
    pub(crate) fn abandon(&self, device: &str, session: u64) {
        let mut pending = self.pending.lock();
        if let Some(calls) = pending.get_mut(device) {
            calls.retain(|_, (to, _)| *to != session);
            if calls.is_empty() {
                pending.remove(device);
            }
        }
    }
}

/// Invokes method `name` on `device` and waits for its answer.
pub(crate) async fn invoke(
    hub: &Hub,
    device: &str,
    name: &str,
    payload: &Value,
    timeouts: MethodTimeouts,
) -> Result<MethodResponse, MethodError> {
    check_name(name)?;
    if timeouts.response > MAX_TIMEOUT || timeouts.connect > MAX_TIMEOUT {
        return Err(MethodError::BadRequest(format!(
            "timeouts are at most {} s",
            MAX_TIMEOUT.as_secs()
        )));
    }
    let body = serde_json::to_vec(payload).expect("JSON values serialise");
    if body.len() > MAX_METHOD_PAYLOAD {
        return Err(MethodError::BadRequest(format!(
            "the payload is {} bytes, over the limit of {MAX_METHOD_PAYLOAD}",
            body.len()
        )));
    }
    if hub.registry.get(device).is_none() {
        return Err(MethodError::DeviceNotFound);
    }
    let (session, outbound) = hub
        .sessions
        .wait_for(device, Subscription::Methods, timeouts.connect)
        .await
        .ok_or(MethodError::DeviceNotOnline(timeouts.connect))?;
    let methods = &hub.methods;
    let rid = format!("{:x}", methods.next_rid.fetch_add(1, Ordering::Relaxed));
    let (tx, rx) = oneshot::channel();
    {
        let mut pending = methods.pending.lock();
        let calls = pending.entry(device.to_owned()).or_default();
        if calls.len() >= MAX_PENDING_PER_DEVICE {
            return Err(MethodError::Throttled);
        }
        calls.insert(rid.clone(), (session, tx));
    }
    let _pending = Pending {
        methods,
        device,
        rid: rid.clone(),
    };
    let request = Outbound {
        topic: format!("$iothub/methods/POST/{name}/?$rid={rid}"),
        payload: Bytes::from(body),
    };
    if !hub.sessions.push(device, &outbound, request) {
        return Err(MethodError::DeviceNotOnline(timeouts.connect));
    }
    hub.counters.add("method_calls", "", 1);
    let (status, answer) = match tokio::time::timeout(timeouts.response, rx).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => return Err(MethodError::DeviceConnectionClosed),
        Err(_) => return Err(MethodError::GatewayTimeout(timeouts.response)),
    };
    if answer.len() > MAX_METHOD_PAYLOAD {
        return Err(MethodError::BadDeviceResponse);
    }
    let payload = if answer.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&answer).map_err(|_| MethodError::BadDeviceResponse)?
    };
    Ok(MethodResponse { status, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_are_bounded() {
        assert!(check_name("reboot").is_ok());
        for bad in ["", "a/b", "a#", "a+b", "x?y", &"m".repeat(MAX_NAME + 1)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_answer_reaches_only_its_own_devices_call() {
        let methods = Methods::default();
        let (tx, mut rx) = oneshot::channel();
        methods
            .pending
            .lock()
            .entry("d1".into())
            .or_default()
            .insert("7".into(), (1, tx));
        assert!(!methods.complete("d2", "7", 200, Bytes::new()));
        assert!(methods.complete("d1", "7", 201, Bytes::from_static(b"{}")));
        assert_eq!(rx.try_recv().unwrap().0, 201);
        assert!(!methods.complete("d1", "7", 200, Bytes::new()));
        let (tx, mut rx) = oneshot::channel();
        let (kept, mut kept_rx) = oneshot::channel();
        let mut pending = methods.pending.lock();
        let calls = pending.entry("d1".into()).or_default();
        calls.insert("8".into(), (1, tx));
        calls.insert("9".into(), (2, kept));
        drop(pending);
        methods.abandon("d1", 1);
        assert!(
            rx.try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Closed)
        );
        assert!(
            kept_rx
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Empty)
        );
    }
}

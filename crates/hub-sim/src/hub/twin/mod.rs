//! Device twins and direct methods, as IoT Hub serves them: [`store`] keeps the twins
//! ([`merge`] patches their JSON and counts its size),
//! [`device`] serves the devices' `$iothub/` topics over MQTT, [`methods`] waits for
//! devices' answers, the REST API on the HTTPS port (`/twins/{id}`) is [`crate::mqtt`]'s `https`, and
//! [`events`] emits connection state and twin change events to the built-in endpoint when
//! they are routed.
//!
//! Cost, as IoT Hub meters them against the daily message quota: twin reads and updates
//! (device or service side) count one message per 4 KB; a method call counts its request
//! and its response, one message per 4 KB each (one each when empty). Twins and methods
//! exist on the standard tier only.

pub mod device;
pub mod events;
pub mod merge;
pub mod methods;
pub mod store;

use crate::hub::Hub;
use crate::registry::DeviceAuth;
use bytes::Bytes;
use events::TwinOp;
use serde_json::{Map, Value};
use store::{Change, TwinError};

/// A publish the hub sends a device unasked or in answer: a twin answer, a desired
/// property notification or a method request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    /// The topic.
    pub topic: String,
    /// The payload.
    pub payload: Bytes,
}

/// The twin as the service reads it, if the device is registered.
pub(crate) fn service_view(hub: &Hub, device: &str) -> Option<Value> {
    let auth = match hub.registry.get(device)? {
        DeviceAuth::Sas { .. } => "sas",
        DeviceAuth::X509 { .. } => "selfSigned",
    };
    Some(
        hub.twins
            .service_view(device, auth, hub.sessions.is_connected(device)),
    )
}

/// The solution changes desired properties and tags: patched (`replace` false) or replaced;
/// a subscribed device is told the desired change, and the change is routed as an event.
pub(crate) fn update(
    hub: &Hub,
    device: &str,
    desired: Option<&Map<String, Value>>,
    tags: Option<&Map<String, Value>>,
    etag: Option<&str>,
    replace: bool,
) -> Result<Change, TwinError> {
    if hub.registry.get(device).is_none() {
        return Err(TwinError::DeviceNotFound(device.to_owned()));
    }
    let _in_order = hub.twins.solution_changes.lock();
    let change = hub
        .twins
        .update(device, desired, tags, etag, replace)
        .inspect_err(|e| {
            if let TwinError::TooLarge { section, .. } = e {
                hub.counters
                    .add("twin_operations_refused", section.as_str(), 1);
            }
        })?;
    hub.counters.add(
        "twin_operations",
        if replace { "replace" } else { "update" },
        1,
    );
    if let Some(notification) = &change.desired_notification {
        device::notify_desired(hub, device, notification);
    }
    let op = if replace {
        TwinOp::Replace
    } else {
        TwinOp::Update
    };
    hub.events
        .twin_changed(&hub.partitions, device, op, change.event_body.clone());
    Ok(change)
}

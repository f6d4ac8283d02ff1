//! Non-telemetry events on the built-in endpoint, as IoT Hub routes them when a route with
//! that data source exists: device connection state events (`deviceConnected`,
//! `deviceDisconnected`) and twin change events (`updateTwin`, `replaceTwin`). Each goes to
//! its device's partition like the device's telemetry, with IoT Hub's properties: message
//! annotation `iothub-message-source`, content type `application/json` and encoding
//! `utf-8`, correlation id (unique), user id (the hub's name), and application properties
//! `hubName`, `deviceId`, `opType`, `operationTimestamp` and `iothub-message-schema`.
//! Without routes (the default, as a hub whose built-in endpoint has none) nothing is sent.

use super::store::timestamp_now;
use crate::partitions::{AuthMethod, Incoming, MessageSource, Partitions};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

/// A route to the built-in endpoint for a non-telemetry data source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Route {
    /// Device connection state events.
    ConnectionState,
    /// Device twin change events.
    TwinChanges,
}

/// What a twin change event says was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwinOp {
    /// A patch (reported by the device, desired or tags by the solution).
    Update,
    /// A replacement of desired properties and tags (`PUT /twins/{id}`).
    Replace,
}

/// The routes in force and the hub name the events carry.
#[derive(Debug)]
pub(crate) struct Events {
    hub_name: String,
    routes: Vec<Route>,
    /// Orders connection state events (the body's `sequenceNumber`).
    sequence: AtomicU64,
    /// When this hub started, ms since the epoch: the sequence numbers' high part, so
    /// that they keep growing across restarts.
    started_ms: i64,
}

impl Events {
    pub(crate) fn new(hub_name: &str, routes: &[Route]) -> Events {
        Events {
            hub_name: hub_name.to_owned(),
            routes: routes.to_vec(),
            sequence: AtomicU64::new(1),
            started_ms: crate::partitions::now_ms(),
        }
    }

    fn routed(&self, route: Route) -> bool {
        self.routes.contains(&route)
    }

    fn emit(
        &self,
        partitions: &Partitions,
        device: &str,
        source: MessageSource,
        schema: &str,
        op: &str,
        body: Value,
    ) {
        let mut message = Incoming::new(device, serde_json::to_vec(&body).expect("JSON"));
        message.auth = AuthMethod::Api;
        message.source = source;
        message.content_type = Some("application/json".into());
        message.content_encoding = Some("utf-8".into());
        message.correlation_id = Some(uuid::Uuid::new_v4().simple().to_string());
        message.user_id = Some(self.hub_name.clone());
        message.properties = vec![
            ("hubName".into(), self.hub_name.clone()),
            ("deviceId".into(), device.to_owned()),
            ("operationTimestamp".into(), timestamp_now()),
            ("iothub-message-schema".into(), schema.into()),
            ("opType".into(), op.into()),
        ];
        partitions.route(message);
    }

    /// A device connected (`true`) or disconnected, if connection state events are routed.
    pub(crate) fn connection_state(&self, partitions: &Partitions, device: &str, connected: bool) {
        if !self.routed(Route::ConnectionState) {
            return;
        }
        let n = self.sequence.fetch_add(1, Ordering::Relaxed);
        let sequence_number = format!("{:032X}{n:032X}", self.started_ms);
        self.emit(
            partitions,
            device,
            MessageSource::DeviceConnectionStateEvents,
            "deviceConnectionStateNotification",
            if connected {
                "deviceConnected"
            } else {
                "deviceDisconnected"
            },
            json!({ "sequenceNumber": sequence_number }),
        );
    }

    /// A twin changed, if twin change events are routed; `body` is
    /// `{"version", "properties": {...}}` ([`super::store::Change::event_body`]).
    pub(crate) fn twin_changed(
        &self,
        partitions: &Partitions,
        device: &str,
        op: TwinOp,
        body: Value,
    ) {
        if !self.routed(Route::TwinChanges) {
            return;
        }
        let op = match op {
            TwinOp::Update => "updateTwin",
            TwinOp::Replace => "replaceTwin",
        };
        self.emit(
            partitions,
            device,
            MessageSource::TwinChangeEvents,
            "twinChangeNotification",
            op,
            body,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partitions::Retention;

    #[test]
    fn events_go_only_where_a_route_exists_to_the_devices_partition() {
        let partitions = Partitions::new(4, Retention::default());
        let none = Events::new("hub", &[]);
        none.connection_state(&partitions, "d1", true);
        none.twin_changed(&partitions, "d1", TwinOp::Update, json!({}));
        let index = partitions.partition_of("d1");
        assert!(partitions.get(index).unwrap().info().is_empty());
        let routed = Events::new("hub", &[Route::ConnectionState]);
        routed.connection_state(&partitions, "d1", true);
        routed.connection_state(&partitions, "d1", false);
        routed.twin_changed(&partitions, "d1", TwinOp::Update, json!({}));
        let mut events = Vec::new();
        partitions.get(index).unwrap().read(0, 10, &mut events);
        assert_eq!(events.len(), 2);
        let m = &events[1].message;
        assert_eq!(m.source, MessageSource::DeviceConnectionStateEvents);
        assert!(
            m.properties
                .contains(&("opType".into(), "deviceDisconnected".into()))
        );
        let first: Value = serde_json::from_slice(&events[0].message.body).unwrap();
        let second: Value = serde_json::from_slice(&m.body).unwrap();
        assert!(first["sequenceNumber"].as_str() < second["sequenceNumber"].as_str());
    }
}

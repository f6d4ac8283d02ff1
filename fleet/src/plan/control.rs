//! The control plane's share of IoT Hub's daily quota: the device twin and direct methods,
//! metered as "Azure IoT Hub billing information" says (the figures, with their source, are
//! in the price table's `[iothub.metering]`).
//!
//! The agent uses the twin whenever it runs on IoT Hub: one twin read after every
//! connection (a desired change made while it was away is not re-sent), a reported patch
//! when its state changes (at most one per `REPORTED_MIN_INTERVAL`), and an acknowledgement
//! of each desired change. What a drone does in a day is an assumption the plan states:
//! [`ControlPlane::default`].

use serde::Serialize;

use super::prices::Metering;

/// A drone's twin and method operations in a day (the plan's assumption, which the
/// operator can change).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ControlPlane {
    /// Connections a day (each begins with a read of the whole twin).
    pub reconnections: f64,
    /// Reported patches a day of the agent's own state (acknowledgements not counted).
    pub reported_patches: f64,
    /// Desired changes a day (each one the service's update, the device's notification,
    /// its acknowledgement, and the service's read back of the twin).
    pub desired_changes: f64,
    /// Direct method calls a day.
    pub methods: f64,
}

impl Default for ControlPlane {
    /// 24 reconnections a day, each bringing four reported patches (the connection's
    /// error, the buffer growing by an order of magnitude, draining, and clear again); one
    /// desired change; no method calls.
    fn default() -> ControlPlane {
        ControlPlane {
            reconnections: 24.0,
            reported_patches: 96.0,
            desired_changes: 1.0,
            methods: 0.0,
        }
    }
}

/// The largest twin the agent's reads return: its reported state (under 1 KB) and the
/// desired settings, well under one 4 KB block.
const TWIN_BYTES: u64 = 2_048;
/// A reported patch: the agent's state, its last error cut to 200 characters.
const REPORTED_PATCH_BYTES: u64 = 1_024;
/// A desired patch, its notification and its acknowledgement: a few settings.
const DESIRED_PATCH_BYTES: u64 = 256;
/// A method's request and its response.
const METHOD_BYTES: u64 = 512;

/// A drone's control-plane messages in a day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ControlPlaneMessages {
    /// Twin reads after connecting.
    pub twin_reads: f64,
    /// Reported patches of the agent's state.
    pub reported_patches: f64,
    /// Desired changes: update, notification, acknowledgement and read back.
    pub desired_changes: f64,
    /// Direct methods: request and response.
    pub methods: f64,
    /// All of it.
    pub total: f64,
}

impl ControlPlane {
    /// What a drone's day of twin and method operations is charged.
    pub fn messages(&self, metering: &Metering) -> ControlPlaneMessages {
        let twin_reads = self.reconnections * metering.messages(TWIN_BYTES);
        let reported_patches = self.reported_patches * metering.messages(REPORTED_PATCH_BYTES);
        let per_desired =
            metering.messages(DESIRED_PATCH_BYTES) * 3.0 + metering.messages(TWIN_BYTES);
        let desired_changes = self.desired_changes * per_desired;
        let methods = self.methods * 2.0 * metering.messages(METHOD_BYTES);
        ControlPlaneMessages {
            twin_reads,
            reported_patches,
            desired_changes,
            methods,
            total: twin_reads + reported_patches + desired_changes + methods,
        }
    }
}

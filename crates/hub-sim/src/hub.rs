//! One hub's data, which every server of it serves: its host name, device registry, the
//! partitions of its built-in endpoint, faults, counters and live device connections. The MQTT
//! listener and sessions, the AMQP server and the admin endpoint take it from here, and the
//! running hub ([`crate::sim`]) builds it.

use crate::faults::Faults;
use crate::partitions::Partitions;
use crate::registry::Registry;
use crate::stats::Counters;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;

/// The live device connections: one per device, a newer one ends the older.
#[derive(Debug, Default)]
pub(crate) struct DeviceSessions {
    live: Mutex<HashMap<String, (u64, CancellationToken)>>,
    next_id: AtomicU64,
}

impl DeviceSessions {
    /// Registers a connection of `device`, ending the one it replaces.
    pub(crate) fn register(&self, device: &str) -> (u64, CancellationToken) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let token = CancellationToken::new();
        if let Some((_, old)) = self
            .live
            .lock()
            .insert(device.to_owned(), (id, token.clone()))
        {
            old.cancel();
        }
        (id, token)
    }

    /// Forgets connection `id` of `device` if it is still the live one.
    pub(crate) fn unregister(&self, device: &str, id: u64) {
        let mut live = self.live.lock();
        if live.get(device).is_some_and(|(live_id, _)| *live_id == id) {
            live.remove(device);
        }
    }

    /// Devices connected now.
    pub(crate) fn count(&self) -> usize {
        self.live.lock().len()
    }
}

/// One hub's data: what its servers serve.
#[derive(Debug)]
pub(crate) struct Hub {
    pub(crate) host: String,
    pub(crate) registry: Registry,
    pub(crate) partitions: Partitions,
    pub(crate) faults: Faults,
    pub(crate) counters: Counters,
    pub(crate) sessions: DeviceSessions,
}

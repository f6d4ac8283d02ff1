//! Faults switchable while the hub runs: drop every device connection, latency added before a
//! device message is enqueued, a delay before each `$management` answer (a hub slow to tell
//! partition properties), a device-to-cloud throttle (messages per second across the
//! hub, as IoT Hub's tiers meter them: a message over the rate waits, which holds its PUBACK
//! back), and stalled receivers (every partition receiver attached so far stays attached,
//! delivers nothing more and answers no detach, as a connection seen once to stop delivering
//! after a session drop; receivers attached later deliver). Stopping and restarting the AMQP side is the server's own switch
//! (`amqp/server.rs`).

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The settings that can change at run time (the admin endpoint's JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultSettings {
    /// Milliseconds added before each device message is enqueued.
    pub latency_ms: u64,
    /// Device-to-cloud messages per second across the hub; 0 is no throttle.
    pub throttle_per_sec: u64,
    /// Milliseconds added before each `$management` answer of the Event Hubs endpoint.
    pub management_delay_ms: u64,
}

/// The live fault switches.
#[derive(Debug)]
pub struct Faults {
    latency_ms: AtomicU64,
    throttle_per_sec: AtomicU64,
    management_delay_ms: AtomicU64,
    next_slot: Mutex<Option<Instant>>,
    drop_devices: watch::Sender<u64>,
    stall_receivers: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            latency_ms: AtomicU64::new(0),
            throttle_per_sec: AtomicU64::new(0),
            management_delay_ms: AtomicU64::new(0),
            next_slot: Mutex::new(None),
            drop_devices: watch::channel(0).0,
            stall_receivers: watch::channel(0).0,
        }
    }
}

impl Faults {
    /// The current settings.
    pub fn settings(&self) -> FaultSettings {
        FaultSettings {
            latency_ms: self.latency_ms.load(Ordering::Relaxed),
            throttle_per_sec: self.throttle_per_sec.load(Ordering::Relaxed),
            management_delay_ms: self.management_delay_ms.load(Ordering::Relaxed),
        }
    }

    /// Replaces the settings.
    pub fn update(&self, settings: FaultSettings) {
        self.latency_ms
            .store(settings.latency_ms, Ordering::Relaxed);
        self.throttle_per_sec
            .store(settings.throttle_per_sec, Ordering::Relaxed);
        self.management_delay_ms
            .store(settings.management_delay_ms, Ordering::Relaxed);
        *self.next_slot.lock() = None;
    }

    /// Closes every device connection now (devices may connect again).
    pub fn drop_device_connections(&self) {
        self.drop_devices.send_modify(|generation| *generation += 1);
    }

    /// A watch that changes whenever device connections are to be dropped.
    pub(crate) fn device_drops(&self) -> watch::Receiver<u64> {
        self.drop_devices.subscribe()
    }

    /// Stalls every partition receiver attached so far: each stays attached, delivers
    /// nothing more and answers no detach, until another receiver takes its partition or
    /// the hub stops.
    pub fn stall_receivers(&self) {
        self.stall_receivers
            .send_modify(|generation| *generation += 1);
    }

    /// A watch that changes whenever the receivers attached so far are to stall.
    pub(crate) fn receiver_stalls(&self) -> watch::Receiver<u64> {
        self.stall_receivers.subscribe()
    }

    /// Waits as the settings demand before one `$management` answer.
    pub(crate) async fn delay_management(&self) {
        let delay = self.management_delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
    }

    /// Waits as the settings demand before one device message is enqueued; true if the
    /// throttle held it back.
    pub(crate) async fn admit(&self) -> bool {
        let latency = self.latency_ms.load(Ordering::Relaxed);
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        let rate = self.throttle_per_sec.load(Ordering::Relaxed);
        if rate == 0 {
            return false;
        }
        let interval = Duration::from_secs_f64(1.0 / rate as f64);
        let now = Instant::now();
        let slot = {
            let mut next = self.next_slot.lock();
            let slot = next.map_or(now, |n| n.max(now));
            *next = Some(slot + interval);
            slot
        };
        if slot > now {
            tokio::time::sleep_until(slot).await;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_throttle_spaces_messages_at_its_rate() {
        let faults = Faults::default();
        faults.update(FaultSettings {
            throttle_per_sec: 10,
            ..FaultSettings::default()
        });
        let start = Instant::now();
        let mut held = 0;
        for _ in 0..21 {
            held += usize::from(faults.admit().await);
        }
        assert_eq!(held, 20);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        faults.update(FaultSettings {
            latency_ms: 250,
            ..FaultSettings::default()
        });
        let start = Instant::now();
        assert!(!faults.admit().await);
        assert_eq!(start.elapsed(), Duration::from_millis(250));
        faults.update(FaultSettings::default());
        assert!(!faults.admit().await);
    }

    #[tokio::test]
    async fn dropping_connections_wakes_watchers() {
        let faults = Faults::default();
        let mut watch = faults.device_drops();
        faults.drop_device_connections();
        tokio::time::timeout(Duration::from_secs(10), watch.changed())
            .await
            .expect("the watcher is woken")
            .unwrap();
    }
}

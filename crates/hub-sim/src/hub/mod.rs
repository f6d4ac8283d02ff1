//! One hub's data, which every server of it serves: its host name, device registry, the
//! partitions of its built-in endpoint, faults, counters, live device connections (each with
//! a bounded outbound queue the hub pushes desired notifications and method requests into),
//! twins ([`twin`]: their store, pending method calls and routed events). The MQTT
//! listener and sessions, the AMQP server and the admin endpoint take it from here, and the
//! running hub ([`crate::sim`]) builds it.

pub mod twin;

use crate::faults::Faults;
use crate::partitions::Partitions;
use crate::registry::Registry;
use crate::stats::Counters;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use twin::Outbound;
use twin::events::Events;
use twin::methods::Methods;
use twin::store::Twins;

/// What a device session subscribed to, of what the hub sends unasked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subscription {
    /// `$iothub/twin/PATCH/properties/desired/#`: desired property notifications.
    Desired,
    /// `$iothub/methods/POST/#`: method requests.
    Methods,
}

/// A session's subscriptions, set by the session and read by the hub, and whether the hub
/// closed it for letting its outbound queue fill.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    desired: AtomicBool,
    methods: AtomicBool,
    overflowed: AtomicBool,
}

impl Subscriptions {
    fn flag(&self, which: Subscription) -> &AtomicBool {
        match which {
            Subscription::Desired => &self.desired,
            Subscription::Methods => &self.methods,
        }
    }

    /// Whether the session subscribed to `which`.
    pub(crate) fn has(&self, which: Subscription) -> bool {
        self.flag(which).load(Ordering::Acquire)
    }

    /// Whether the hub closed the session because its outbound queue was full.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }
}

/// One live connection: its id, what ends it, its outbound queue and subscriptions.
#[derive(Debug)]
struct Live {
    id: u64,
    kicked: CancellationToken,
    outbound: mpsc::Sender<Outbound>,
    subscriptions: Arc<Subscriptions>,
}

/// The live device connections: one per device, a newer one ends the older.
#[derive(Debug, Default)]
pub(crate) struct DeviceSessions {
    live: Mutex<HashMap<String, Live>>,
    next_id: AtomicU64,
    /// Woken when a session registers or subscribes.
    changed: Notify,
}

impl DeviceSessions {
    /// Registers a connection of `device` with its outbound queue, ending the one it
    /// replaces; returns its id, what ends it and its subscriptions.
    pub(crate) fn register(
        &self,
        device: &str,
        outbound: mpsc::Sender<Outbound>,
    ) -> (u64, CancellationToken, Arc<Subscriptions>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let kicked = CancellationToken::new();
        let subscriptions = Arc::new(Subscriptions::default());
        let live = Live {
            id,
            kicked: kicked.clone(),
            outbound,
            subscriptions: subscriptions.clone(),
        };
        if let Some(old) = self.live.lock().insert(device.to_owned(), live) {
            old.kicked.cancel();
        }
        self.changed.notify_waiters();
        (id, kicked, subscriptions)
    }

    /// Records that a session subscribed to (or unsubscribed from) `which`.
    pub(crate) fn subscribe(&self, subscriptions: &Subscriptions, which: Subscription, on: bool) {
        subscriptions.flag(which).store(on, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Forgets connection `id` of `device` if it is still the live one.
    pub(crate) fn unregister(&self, device: &str, id: u64) {
        let mut live = self.live.lock();
        if live.get(device).is_some_and(|l| l.id == id) {
            live.remove(device);
        }
    }

    /// Devices connected now.
    #[cfg(feature = "test-support")]
    pub(crate) fn count(&self) -> usize {
        self.live.lock().len()
    }

    /// Whether `device` is connected now.
    pub(crate) fn is_connected(&self, device: &str) -> bool {
        self.live.lock().contains_key(device)
    }

    /// The id and outbound queue of `device`'s live session if it subscribed to `which`.
    pub(crate) fn subscriber(
        &self,
        device: &str,
        which: Subscription,
    ) -> Option<(u64, mpsc::Sender<Outbound>)> {
        let live = self.live.lock();
        let session = live.get(device)?;
        session
            .subscriptions
            .has(which)
            .then(|| (session.id, session.outbound.clone()))
    }

    /// Waits up to `timeout` for `device` to be connected and subscribed to `which`.
    pub(crate) async fn wait_for(
        &self,
        device: &str,
        which: Subscription,
        timeout: Duration,
    ) -> Option<(u64, mpsc::Sender<Outbound>)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(outbound) = self.subscriber(device, which) {
                return Some(outbound);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Queues `message` for `device`'s session. A session whose queue is full is not
    /// reading: it is closed (the device reconnects and reads its twin) and the message is
    /// not sent. Whether it was queued.
    pub(crate) fn push(
        &self,
        device: &str,
        outbound: &mpsc::Sender<Outbound>,
        message: Outbound,
    ) -> bool {
        match outbound.try_send(message) {
            Ok(()) => true,
            Err(_) => {
                if let Some(live) = self.live.lock().get(device)
                    && live.outbound.same_channel(outbound)
                {
                    live.subscriptions.overflowed.store(true, Ordering::Release);
                    live.kicked.cancel();
                }
                false
            }
        }
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
    /// Device twins.
    pub(crate) twins: Twins,
    /// Direct method calls waiting for answers.
    pub(crate) methods: Methods,
    /// Connection state and twin change events, and whether they are routed.
    pub(crate) events: Events,
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message() -> Outbound {
        Outbound {
            topic: "t".into(),
            payload: Bytes::new(),
        }
    }

    #[test]
    fn a_session_whose_queue_is_full_is_closed() {
        let sessions = DeviceSessions::default();
        let (tx, _rx) = mpsc::channel(1);
        let (_, kicked, subscriptions) = sessions.register("d", tx.clone());
        assert!(sessions.push("d", &tx, message()));
        assert!(!kicked.is_cancelled());
        assert!(!sessions.push("d", &tx, message()));
        assert!(kicked.is_cancelled() && subscriptions.overflowed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_when_the_device_subscribes_or_at_its_timeout() {
        let sessions = Arc::new(DeviceSessions::default());
        let timeout = Duration::from_secs(5);
        assert!(
            sessions
                .wait_for("d", Subscription::Methods, timeout)
                .await
                .is_none()
        );
        let waiter = {
            let sessions = sessions.clone();
            tokio::spawn(async move {
                sessions
                    .wait_for("d", Subscription::Methods, timeout)
                    .await
                    .map(|(id, _)| id)
            })
        };
        tokio::task::yield_now().await;
        let (tx, _rx) = mpsc::channel(1);
        let (id, _, subscriptions) = sessions.register("d", tx);
        assert!(sessions.subscriber("d", Subscription::Methods).is_none());
        sessions.subscribe(&subscriptions, Subscription::Methods, true);
        assert_eq!(waiter.await.unwrap(), Some(id));
        assert!(sessions.subscriber("d", Subscription::Desired).is_none());
    }
}

//! The queue between a source and the pipeline, bounded in bytes rather than messages.
//!
//! A message enters only with a reservation of its size (payload, identity and the
//! message's own footprint) from a byte budget, and gives the bytes back when the
//! pipeline takes it. So a few large messages and many small ones are bounded alike, and
//! the memory the queue can hold is the budget, whatever the messages look like. The
//! bytes held and their peak are metrics (`cloud_writer_source_queue_bytes`,
//! `cloud_writer_source_queue_bytes_peak`).
//!
//! It does not own what happens while a source waits for room: a source that must keep
//! its connection serviced (MQTT) waits with [`QueueSender::reserve`] beside its other
//! work; one that can simply wait (Event Hubs, a file) uses [`QueueSender::send`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Semaphore, mpsc};

use super::Message;
use crate::metrics::Metrics;

/// The bytes a message holds while queued: payload, identity and the message itself.
pub fn message_bytes(message: &Message) -> usize {
    message.payload.len() + message.identity.len() + std::mem::size_of::<Message>()
}

/// The receiving side is gone: the message was not queued.
#[derive(Debug)]
pub struct Closed<T>(pub T);

struct Budget {
    semaphore: Semaphore,
    capacity: usize,
    held: AtomicUsize,
    peak: AtomicUsize,
    metrics: Arc<Metrics>,
}

impl Budget {
    /// What a message of `bytes` reserves: at most the whole budget, so that a message
    /// larger than the budget still passes (alone).
    fn charge(&self, bytes: usize) -> u32 {
        u32::try_from(bytes.clamp(1, self.capacity)).unwrap_or(u32::MAX)
    }

    fn taken(&self, charge: u32) {
        let held = self.held.fetch_add(charge as usize, Ordering::AcqRel) + charge as usize;
        let peak = self.peak.fetch_max(held, Ordering::AcqRel).max(held);
        self.metrics.set_source_queue_bytes(held, peak);
    }

    /// Counts the bytes as given back before the room is: a sender that takes the room
    /// next counts its bytes after, so the count never passes the budget.
    fn returned(&self, charge: u32) {
        let held = self.held.fetch_sub(charge as usize, Ordering::AcqRel) - charge as usize;
        self.semaphore.add_permits(charge as usize);
        self.metrics
            .set_source_queue_bytes(held, self.peak.load(Ordering::Acquire));
    }
}

/// A queue of at most `budget` bytes (at least one message). Its gauges go to `metrics`.
pub fn channel(budget: usize, metrics: Arc<Metrics>) -> (QueueSender, QueueReceiver) {
    // The semaphore counts in u32 per acquisition and usize::MAX >> 3 overall.
    let capacity = budget.clamp(1, u32::MAX as usize);
    metrics.set_source_queue_budget(capacity);
    let budget = Arc::new(Budget {
        semaphore: Semaphore::new(capacity),
        capacity,
        held: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
        metrics,
    });
    let (tx, rx) = mpsc::unbounded_channel();
    (
        QueueSender {
            tx,
            budget: budget.clone(),
        },
        QueueReceiver { rx, budget },
    )
}

/// The sending side of the queue.
#[derive(Clone)]
pub struct QueueSender {
    tx: mpsc::UnboundedSender<(Message, u32)>,
    budget: Arc<Budget>,
}

impl std::fmt::Debug for QueueSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSender")
            .field("budget", &self.budget.capacity)
            .finish_non_exhaustive()
    }
}

/// Room for one message of a known size, taken from the budget; given back if dropped
/// unused.
#[must_use = "a reservation holds budget until it sends or drops"]
pub struct Reservation {
    sender: QueueSender,
    charge: u32,
    sent: bool,
}

impl Reservation {
    /// Queues `message` in the room reserved (its size may differ a little from the
    /// size reserved: the reservation is what is counted).
    pub fn send(mut self, message: Message) -> Result<(), Closed<Message>> {
        self.sent = true;
        self.sender.budget.taken(self.charge);
        if let Err(mpsc::error::SendError((message, charge))) =
            self.sender.tx.send((message, self.charge))
        {
            self.sender.budget.returned(charge);
            return Err(Closed(message));
        }
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.sent {
            self.sender
                .budget
                .semaphore
                .add_permits(self.charge as usize);
        }
    }
}

impl QueueSender {
    /// Waits for room for a message of `bytes`; `Err` once the receiver is gone.
    /// Cancel-safe: dropping the future takes nothing from the budget.
    pub async fn reserve(&self, bytes: usize) -> Result<Reservation, Closed<()>> {
        let charge = self.budget.charge(bytes);
        tokio::select! {
            biased;
            () = self.tx.closed() => Err(Closed(())),
            permit = self.budget.semaphore.acquire_many(charge) => match permit {
                Ok(permit) => {
                    permit.forget();
                    Ok(Reservation { sender: self.clone(), charge, sent: false })
                }
                Err(_) => Err(Closed(())),
            },
        }
    }

    /// Waits for room, then queues `message`; `Err` with the message once the receiver
    /// is gone.
    pub async fn send(&self, message: Message) -> Result<(), Closed<Message>> {
        match self.reserve(message_bytes(&message)).await {
            Ok(reservation) => reservation.send(message),
            Err(Closed(())) => Err(Closed(message)),
        }
    }

    /// The budget in bytes.
    pub fn budget(&self) -> usize {
        self.budget.capacity
    }
}

/// The receiving side of the queue: taking a message gives its bytes back.
pub struct QueueReceiver {
    rx: mpsc::UnboundedReceiver<(Message, u32)>,
    budget: Arc<Budget>,
}

impl std::fmt::Debug for QueueReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueReceiver").finish_non_exhaustive()
    }
}

impl QueueReceiver {
    /// Takes up to `limit` messages into `out`, waiting for at least one; 0 once every
    /// sender is gone and the queue is empty.
    pub async fn recv_many(&mut self, out: &mut Vec<Message>, limit: usize) -> usize {
        let mut taken = Vec::with_capacity(limit.min(1024));
        let n = self.rx.recv_many(&mut taken, limit).await;
        let mut charge = 0u64;
        for (message, bytes) in taken {
            charge += u64::from(bytes);
            out.push(message);
        }
        if charge > 0 {
            // Given back in pieces of at most u32 (what one message can hold).
            let mut left = charge;
            while left > 0 {
                let piece = left.min(u64::from(u32::MAX));
                self.budget.returned(piece as u32);
                left -= piece;
            }
        }
        n
    }

    /// Takes one message, waiting for it; `None` once every sender is gone.
    #[cfg(test)]
    pub async fn recv(&mut self) -> Option<Message> {
        let (message, charge) = self.rx.recv().await?;
        self.budget.returned(charge);
        Some(message)
    }

    /// Messages queued.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    #[cfg(feature = "test-support")]
    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    use super::*;
    use crate::source::Ack;

    fn message(payload_len: usize) -> Message {
        Message {
            identity: "d".into(),
            payload: Bytes::from(vec![b'x'; payload_len]),
            enqueued_time: None,
            received_at: Instant::now(),
            kind: Default::default(),
            ack: Ack::none(),
        }
    }

    #[tokio::test]
    async fn bytes_not_counts_bound_the_queue() {
        let metrics = Arc::new(Metrics::new());
        let one = message_bytes(&message(1000));
        let (tx, mut rx) = channel(3 * one, metrics.clone());
        for _ in 0..3 {
            tx.send(message(1000)).await.unwrap();
        }
        // A fourth does not fit until the pipeline takes one.
        let fourth = tx.send(message(1000));
        tokio::pin!(fourth);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut fourth)
                .await
                .is_err()
        );
        assert_eq!(rx.recv().await.unwrap().payload.len(), 1000);
        fourth.await.unwrap();
        // Small messages fit many more of them in the same budget.
        let mut out = Vec::new();
        assert_eq!(rx.recv_many(&mut out, 10).await, 3);
        let small = message_bytes(&message(10));
        let mut sent = 0;
        while let Ok(Ok(r)) =
            tokio::time::timeout(Duration::from_millis(20), tx.reserve(small)).await
        {
            r.send(message(10)).unwrap();
            sent += 1;
        }
        assert_eq!(sent, 3 * one / small);
        let text = metrics.render();
        assert!(
            text.contains(&format!("cloud_writer_source_queue_bytes {}", sent * small)),
            "{text}"
        );
        assert!(
            text.contains(&format!("cloud_writer_source_queue_bytes_peak {}", 3 * one)),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_message_larger_than_the_budget_passes_alone() {
        let (tx, mut rx) = channel(100, Arc::new(Metrics::new()));
        tx.send(message(10_000)).await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), tx.reserve(10))
                .await
                .is_err()
        );
        assert!(rx.recv().await.is_some());
        tx.send(message(10)).await.unwrap();
    }

    #[tokio::test]
    async fn an_unused_reservation_gives_its_bytes_back_and_a_closed_queue_refuses() {
        let (tx, rx) = channel(100, Arc::new(Metrics::new()));
        drop(tx.reserve(100).await.unwrap());
        let r = tx.reserve(100).await.unwrap();
        drop(rx);
        assert!(r.send(message(1)).is_err());
        assert!(tx.reserve(100).await.is_err());
    }
}

//! Faults switchable at run time: added latency, a rate of 503 answers, a rate of requests that
//! hang and then answer 408 (request timeout), and the largest document accepted (the
//! service's 2 MB, lowered so that ordinary documents are refused as too large).

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The largest document Cosmos DB accepts: 2 MB of JSON.
pub const MAX_DOCUMENT_BYTES: u64 = 2 * 1024 * 1024;

/// The fault settings, as the admin endpoint reads and writes them (every field optional on
/// write: only the given ones change).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultSettings {
    /// Latency added to every request, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// Share of requests (0 to 1) answered 503 Service Unavailable without effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate_503: Option<f64>,
    /// Share of requests (0 to 1) held for `timeout_ms` and then answered 408 without effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_rate: Option<f64>,
    /// How long a timed-out request is held, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The largest document written (created, upserted, replaced) in bytes; a larger one is
    /// answered 413 without effect. [`MAX_DOCUMENT_BYTES`] unless lowered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_document_bytes: Option<u64>,
}

/// The live fault state, read on every request without locks.
#[derive(Debug)]
pub struct Faults {
    latency_ms: AtomicU64,
    error_rate_503: AtomicU64,
    timeout_rate: AtomicU64,
    timeout_ms: AtomicU64,
    max_document_bytes: AtomicU64,
    /// Requests that have begun waiting the added latency, since start.
    delayed: AtomicU64,
}

/// What to do with a request before serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// Serve it.
    None,
    /// Answer 503.
    Unavailable,
    /// Hold it this long, then answer 408.
    Timeout(Duration),
}

impl Faults {
    /// No faults, `latency` added to each request.
    pub fn new(latency: Duration) -> Self {
        Self {
            latency_ms: AtomicU64::new(latency.as_millis() as u64),
            error_rate_503: AtomicU64::new(0f64.to_bits()),
            timeout_rate: AtomicU64::new(0f64.to_bits()),
            timeout_ms: AtomicU64::new(5_000),
            max_document_bytes: AtomicU64::new(MAX_DOCUMENT_BYTES),
            delayed: AtomicU64::new(0),
        }
    }

    /// Applies the given settings; rates are clamped to `[0, 1]`.
    pub fn update(&self, s: FaultSettings) {
        if let Some(ms) = s.latency_ms {
            self.latency_ms.store(ms, Ordering::Relaxed);
        }
        if let Some(r) = s.error_rate_503 {
            self.error_rate_503
                .store(r.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
        }
        if let Some(r) = s.timeout_rate {
            self.timeout_rate
                .store(r.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
        }
        if let Some(ms) = s.timeout_ms {
            self.timeout_ms.store(ms, Ordering::Relaxed);
        }
        if let Some(bytes) = s.max_document_bytes {
            self.max_document_bytes.store(bytes, Ordering::Relaxed);
        }
    }

    /// The current settings, all fields present.
    pub fn settings(&self) -> FaultSettings {
        FaultSettings {
            latency_ms: Some(self.latency_ms.load(Ordering::Relaxed)),
            error_rate_503: Some(f64::from_bits(self.error_rate_503.load(Ordering::Relaxed))),
            timeout_rate: Some(f64::from_bits(self.timeout_rate.load(Ordering::Relaxed))),
            timeout_ms: Some(self.timeout_ms.load(Ordering::Relaxed)),
            max_document_bytes: Some(self.max_document_bytes.load(Ordering::Relaxed)),
        }
    }

    /// The largest document accepted, in bytes.
    pub fn max_document_bytes(&self) -> usize {
        usize::try_from(self.max_document_bytes.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// The added latency for a request arriving now; one that is not zero counts the
    /// request as delayed.
    pub fn delay(&self) -> Duration {
        let latency = Duration::from_millis(self.latency_ms.load(Ordering::Relaxed));
        if !latency.is_zero() {
            self.delayed.fetch_add(1, Ordering::Relaxed);
        }
        latency
    }

    #[cfg(feature = "test-support")]
    /// How many requests have begun waiting an added latency since start.
    pub fn delayed(&self) -> u64 {
        self.delayed.load(Ordering::Relaxed)
    }

    /// Draws the fault for one request.
    pub fn draw(&self) -> Injected {
        let timeout = f64::from_bits(self.timeout_rate.load(Ordering::Relaxed));
        let unavailable = f64::from_bits(self.error_rate_503.load(Ordering::Relaxed));
        if timeout <= 0.0 && unavailable <= 0.0 {
            return Injected::None;
        }
        let x: f64 = rand::random();
        if x < timeout {
            Injected::Timeout(Duration::from_millis(
                self.timeout_ms.load(Ordering::Relaxed),
            ))
        } else if x < timeout + unavailable {
            Injected::Unavailable
        } else {
            Injected::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_decide_the_draw() {
        let f = Faults::new(Duration::ZERO);
        assert!((0..100).all(|_| f.draw() == Injected::None));
        f.update(FaultSettings {
            error_rate_503: Some(2.0),
            ..Default::default()
        });
        assert_eq!(f.settings().error_rate_503, Some(1.0));
        assert!((0..100).all(|_| f.draw() == Injected::Unavailable));
        f.update(FaultSettings {
            error_rate_503: Some(0.0),
            timeout_rate: Some(1.0),
            timeout_ms: Some(7),
            ..Default::default()
        });
        assert_eq!(f.draw(), Injected::Timeout(Duration::from_millis(7)));
    }
}

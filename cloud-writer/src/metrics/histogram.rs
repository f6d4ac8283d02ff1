//! A classic Prometheus histogram whose buckets can be read back: the writer's lateness.
//!
//! prometheus-client's `Histogram` keeps its buckets private (only the exposition reads
//! them) and takes a mutex per observation. This one has fixed upper bounds, an atomic
//! count per bucket and encodes itself through prometheus-client's own
//! `MetricEncoder::encode_histogram`, so the exposition is the same text (`_sum`,
//! `_count`, cumulative `_bucket{le}` up to `+Inf`) while [`BucketHistogram::cumulative`]
//! gives the demo the buckets without rendering and parsing text.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A histogram over fixed upper bounds (and `+Inf`). Clones share the counts.
#[derive(Debug, Clone)]
pub struct BucketHistogram(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Finite upper bounds, ascending.
    bounds: &'static [f64],
    /// One count per bound, and the last for `+Inf`.
    counts: Box<[AtomicU64]>,
    /// The sum of the observations, as `f64` bits.
    sum: AtomicU64,
}

impl BucketHistogram {
    /// A histogram over `bounds` (finite, ascending) and `+Inf`.
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        BucketHistogram(Arc::new(Inner {
            bounds,
            counts,
            sum: AtomicU64::new(0f64.to_bits()),
        }))
    }

    /// Counts `v` in the first bucket whose upper bound is at least `v` (`NaN` in `+Inf`).
    pub fn observe(&self, v: f64) {
        let inner = &*self.0;
        let index = if v.is_nan() {
            inner.bounds.len()
        } else {
            inner.bounds.partition_point(|bound| *bound < v)
        };
        inner.counts[index].fetch_add(1, Ordering::Relaxed);
        let _ = inner
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }

    /// Every bucket as (upper bound, observations at or below it), ascending, the last
    /// bound `f64::INFINITY`: what the exposition's `_bucket` lines say.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let inner = &*self.0;
        let mut total = 0;
        inner
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(inner.counts.iter())
            .map(|(bound, count)| {
                total += count.load(Ordering::Relaxed);
                (bound, total)
            })
            .collect()
    }
}

impl TypedMetric for BucketHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for BucketHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let inner = &*self.0;
        // Per bucket, not cumulative: the encoder adds them up.
        let buckets: Vec<(f64, u64)> = inner
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(inner.counts.iter())
            .map(|(bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = f64::from_bits(inner.sum.load(Ordering::Relaxed));
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    use super::*;

    const BOUNDS: [f64; 4] = [0.01, 0.5, 1.0, 300.0];

    fn render(register: impl FnOnce(&mut Registry)) -> String {
        let mut registry = Registry::with_prefix("w");
        register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn renders_as_prometheus_clients_histogram_does() {
        let ours = BucketHistogram::new(&BOUNDS);
        let theirs = Histogram::new(BOUNDS);
        for v in [0.0, 0.01, 0.02, 0.5, 0.75, 1.0, 299.0, 301.0, 1e9, f64::NAN] {
            ours.observe(v);
            theirs.observe(v);
        }
        let ours_text = render(|r| r.register("lateness_seconds", "Lateness", ours.clone()));
        let theirs_text = render(|r| r.register("lateness_seconds", "Lateness", theirs));
        assert_eq!(ours_text, theirs_text);
    }

    #[test]
    fn reads_back_the_cumulative_buckets() {
        let h = BucketHistogram::new(&BOUNDS);
        for v in [0.005, 0.3, 0.3, 2.0, 400.0] {
            h.observe(v);
        }
        assert_eq!(
            h.cumulative(),
            vec![
                (0.01, 1),
                (0.5, 3),
                (1.0, 3),
                (300.0, 4),
                (f64::INFINITY, 5)
            ]
        );
    }
}

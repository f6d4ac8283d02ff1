//! The cloud-writer's per-message CPU path through the telemetry codec: decoding a wire
//! message, writing its latest-position document, and the whole path from received bytes
//! to a document appended to a batch with its partition key hash.
//!
//! The messages are a realistic mix as the edge agent sends them from MAVLink fixes:
//! coordinates in 1e-7 degrees, altitude in millimetres, heading in centidegrees, speed
//! from a velocity vector (full-precision floats), some without optional fields, a few
//! with a field a newer device added.

use std::hint::black_box;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cosmos_wire::epk::epk_u128_of_str;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use telemetry::DocumentLayout;
use telemetry::wire::{Position, decode, decode_reference};

/// Messages per iteration; figures are per iteration, throughput per message.
const MESSAGES: usize = 1024;

/// A small deterministic generator (64-bit LCG), so every run sees the same mix.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

fn base_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T09:15:02.500Z")
        .unwrap()
        .to_utc()
}

fn positions() -> Vec<Position> {
    let mut rng = Lcg(42);
    let start = base_time();
    (0..MESSAGES)
        .map(|i| {
            let full = i % 8 != 0;
            let (vx, vy) = (rng.next(3000) as f64, rng.next(3000) as f64);
            Position {
                device_id: format!("drone-{:04}", rng.next(500)),
                seq: 1_000 + i as u64,
                ts: start
                    + chrono::Duration::milliseconds(i as i64 * 5_000 + rng.next(1000) as i64),
                lat: (470_000_000 + rng.next(10_000_000) as i64) as f64 / 1e7,
                lon: (-1_225_000_000 + rng.next(10_000_000) as i64) as f64 / 1e7,
                alt_m: full.then(|| rng.next(150_000) as f64 / 1000.0),
                heading_deg: full.then(|| rng.next(36_000) as f64 / 100.0),
                speed_mps: full.then(|| vx.hypot(vy) / 100.0),
                battery_pct: full.then(|| rng.next(101) as u8),
                gnss: Default::default(),
            }
        })
        .collect()
}

fn messages(positions: &[Position]) -> Vec<Vec<u8>> {
    positions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut bytes = p.encode().unwrap();
            if i % 32 == 0 {
                // A newer device's extra field, before the closing brace.
                bytes.pop();
                bytes.extend_from_slice(br#","fw":"4.5.1","rssi":-71}"#);
            }
            bytes
        })
        .collect()
}

fn codec(c: &mut Criterion) {
    let positions = positions();
    let messages = messages(&positions);
    let layout = DocumentLayout::default();
    let enqueued = Some(base_time());
    let mut group = c.benchmark_group("telemetry");
    group
        .throughput(Throughput::Elements(MESSAGES as u64))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));

    group.bench_function("decode", |b| {
        b.iter(|| {
            for message in &messages {
                black_box(decode(black_box(message)).unwrap());
            }
        })
    });
    group.bench_function("decode_reference", |b| {
        b.iter(|| {
            for message in &messages {
                black_box(decode_reference(black_box(message)).unwrap());
            }
        })
    });
    group.bench_function("write_latest", |b| {
        let mut out = Vec::with_capacity(512);
        b.iter(|| {
            for position in &positions {
                out.clear();
                layout.write_latest(black_box(position), enqueued, &mut out);
                black_box(&out);
            }
        })
    });
    group.bench_function("decode_document_epk", |b| {
        let mut batch = Vec::with_capacity(MESSAGES * 512);
        b.iter(|| {
            batch.clear();
            for message in &messages {
                let position = decode(black_box(message)).unwrap();
                layout.write_latest(&position, enqueued, &mut batch);
                black_box(epk_u128_of_str(&position.device_id));
            }
            black_box(&batch);
        })
    });
    group.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);

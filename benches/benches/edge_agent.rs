//! The edge agent's hot paths: buffering a message (append and acknowledge, with and
//! without fsync), scanning a segment at start, and computing a simulated fix.

use std::hint::black_box;
use std::time::Duration;

use chrono::Utc;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use edge_agent::BufferConfig;
use edge_agent::{DiskBuffer, Record, scan_records};
use edge_agent::{SimConfig, SimRoute};

/// A typical version 1 message (about 190 bytes).
const PAYLOAD: &[u8] = br#"{"v":1,"deviceId":"drone-0042","seq":1834,"ts":"2026-11-22T09:15:02.500Z","lat":47.6205,"lon":-122.3493,"altM":121.5,"headingDeg":270.0,"speedMps":12.3,"batteryPct":81}"#;

fn buffer(c: &mut Criterion) {
    let mut group = c.benchmark_group("edge_agent/buffer");
    group.throughput(Throughput::Elements(1));
    for fsync in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut buffer = DiskBuffer::open(&BufferConfig {
            dir: dir.path().to_owned(),
            max_bytes: 64 * 1024 * 1024,
            fsync,
        })
        .unwrap();
        let name = if fsync {
            "append_ack_fsync"
        } else {
            "append_ack"
        };
        if fsync {
            group
                .sample_size(20)
                .measurement_time(Duration::from_secs(5));
        }
        group.bench_function(name, |b| {
            b.iter(|| {
                let record = buffer.append(0, PAYLOAD.to_vec()).unwrap();
                buffer.ack(black_box(record.id)).unwrap();
            })
        });
    }
    group.finish();
}

fn segment_scan(c: &mut Criterion) {
    let mut segment = Vec::new();
    for id in 0..1000 {
        Record {
            id,
            created_ms: 1_700_000_000_000,
            payload: PAYLOAD.to_vec(),
        }
        .encode_into(&mut segment);
    }
    let mut group = c.benchmark_group("edge_agent/segment");
    group.throughput(Throughput::Bytes(segment.len() as u64));
    group.bench_function("scan_1000_records", |b| {
        b.iter(|| scan_records(black_box(&segment)))
    });
    let record = Record {
        id: 7,
        created_ms: 0,
        payload: PAYLOAD.to_vec(),
    };
    group.throughput(Throughput::Bytes(record.disk_len() as u64));
    group.bench_function("encode_record", |b| {
        let mut out = Vec::with_capacity(512);
        b.iter(|| {
            out.clear();
            record.encode_into(&mut out);
        })
    });
    group.finish();
}

fn sim(c: &mut Criterion) {
    let route = SimRoute::new(&SimConfig::default());
    let now = Utc::now();
    let mut elapsed = Duration::ZERO;
    c.bench_function("edge_agent/sim/fix_after", |b| {
        b.iter(|| {
            elapsed += Duration::from_millis(50);
            route.fix_after(black_box(elapsed), now)
        })
    });
}

criterion_group!(benches, buffer, segment_scan, sim);
criterion_main!(benches);

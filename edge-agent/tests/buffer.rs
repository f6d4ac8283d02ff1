//! The disk buffer on a real directory: restarts, acknowledgements, the size bound and
//! damaged files.

use std::fs;
use std::path::{Path, PathBuf};

use edge_agent::BufferConfig;
use edge_agent::DiskBuffer;

fn config(dir: &Path, max_bytes: u64) -> BufferConfig {
    BufferConfig {
        dir: dir.to_owned(),
        max_bytes,
        fsync: true,
    }
}

fn payload(n: u64) -> Vec<u8> {
    format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(40)).into_bytes()
}

fn append(buffer: &mut DiskBuffer, count: u64) -> Vec<u64> {
    (0..count)
        .map(|n| {
            buffer
                .append(1_700_000_000_000 + n as i64, payload(n))
                .unwrap()
                .id
        })
        .collect()
}

fn pending(buffer: &DiskBuffer) -> Vec<u64> {
    buffer.pending_from(0).collect()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("seg-"))
        .collect();
    files.sort();
    files
}

#[test]
fn records_survive_a_restart_and_acked_ones_do_not_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut buffer = DiskBuffer::open(&config(dir.path(), 1 << 20)).unwrap();
    let ids = append(&mut buffer, 10);
    assert_eq!(ids, (1..=10).collect::<Vec<_>>());
    // Out of order, as after a reconnect: newest first, then the oldest.
    for id in [10, 1, 2, 3] {
        buffer.ack(id).unwrap();
    }
    drop(buffer);

    let mut buffer = DiskBuffer::open(&config(dir.path(), 1 << 20)).unwrap();
    assert_eq!(pending(&buffer), [4, 5, 6, 7, 8, 9]);
    assert_eq!(buffer.next_id(), 11);
    let record = buffer.read(5).unwrap().unwrap();
    assert_eq!(record.payload, payload(4));
    assert_eq!(record.created_ms, 1_700_000_000_004);
    assert_eq!(buffer.stats().corrupt, 0);
}

#[test]
fn ids_never_repeat_even_when_everything_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let max = 4096;
    let mut buffer = DiskBuffer::open(&config(dir.path(), max)).unwrap();
    let ids = append(&mut buffer, 100);
    for id in buffer.pending_from(0).collect::<Vec<_>>() {
        buffer.ack(id).unwrap();
    }
    assert_eq!(buffer.stats().depth, 0);
    // Fully acknowledged segments are deleted, except the newest.
    assert_eq!(segments(dir.path()).len(), 1);
    drop(buffer);
    let buffer = DiskBuffer::open(&config(dir.path(), max)).unwrap();
    assert_eq!(buffer.next_id(), ids.last().unwrap() + 1);
    assert_eq!(buffer.stats().depth, 0);
}

#[test]
fn a_full_buffer_drops_the_oldest_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let max = 4096;
    let mut buffer = DiskBuffer::open(&config(dir.path(), max)).unwrap();
    append(&mut buffer, 200);
    let stats = buffer.stats();
    assert!(stats.bytes <= max + max / 16 + 100, "{stats:?}");
    assert!(stats.dropped_full > 0, "{stats:?}");
    assert_eq!(stats.depth + stats.dropped_full, 200, "{stats:?}");
    // What is left is the newest, contiguous up to the last id.
    let left = pending(&buffer);
    assert_eq!(*left.last().unwrap(), 200);
    assert_eq!(left.len() as u64, stats.depth);
    assert!(left.windows(2).all(|w| w[1] == w[0] + 1));
    assert_eq!(*left.first().unwrap(), stats.dropped_full + 1);
}

#[test]
fn a_corrupted_record_is_reported_and_the_rest_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut buffer = DiskBuffer::open(&config(dir.path(), 1 << 20)).unwrap();
    append(&mut buffer, 5);
    drop(buffer);
    let file = &segments(dir.path())[0];
    let mut bytes = fs::read(file).unwrap();
    let record_len = bytes.len() / 5;
    // Damage the payload of the second record.
    bytes[record_len + 40] ^= 0xff;
    fs::write(file, &bytes).unwrap();

    let mut buffer = DiskBuffer::open(&config(dir.path(), 1 << 20)).unwrap();
    assert_eq!(buffer.stats().corrupt, 1);
    assert_eq!(pending(&buffer), [1, 3, 4, 5]);
    assert_eq!(buffer.next_id(), 6);
    assert_eq!(buffer.read(3).unwrap().unwrap().payload, payload(2));
    // New records go on after the damage.
    assert_eq!(buffer.append(0, payload(9)).unwrap().id, 6);
}

#[test]
fn damage_found_when_reading_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut buffer = DiskBuffer::open(&config(dir.path(), 1 << 20)).unwrap();
    append(&mut buffer, 3);
    let file = &segments(dir.path())[0];
    let mut bytes = fs::read(file).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x01;
    fs::write(file, &bytes).unwrap();

    assert!(buffer.read(3).unwrap().is_none());
    assert_eq!(buffer.stats().corrupt, 1);
    assert_eq!(pending(&buffer), [1, 2]);
    assert!(buffer.read(2).unwrap().is_some());
}

#[test]
fn garbage_files_and_a_torn_tail_do_not_stop_the_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let mut buffer = DiskBuffer::open(&config(dir.path(), 1 << 20)).unwrap();
    append(&mut buffer, 3);
    drop(buffer);
    let file = &segments(dir.path())[0];
    let bytes = fs::read(file).unwrap();
    // A power cut in the middle of the last record.
    fs::write(file, &bytes[..bytes.len() - 10]).unwrap();
    // A segment full of garbage and a damaged journal.
    fs::write(
        dir.path().join("seg-00000000000000000050.log"),
        b"not a record at all",
    )
    .unwrap();
    fs::write(dir.path().join("acks.log"), b"\x01\x02\x03").unwrap();

    let mut buffer = DiskBuffer::open(&config(dir.path(), 1 << 20)).unwrap();
    assert_eq!(pending(&buffer), [1, 2]);
    assert_eq!(buffer.stats().corrupt, 2);
    // The garbage segment's name still moves the ids past it.
    assert_eq!(buffer.append(0, payload(0)).unwrap().id, 50);
}

#[test]
fn segments_stay_small_and_go_when_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let unsynced = BufferConfig {
        fsync: false,
        ..config(dir.path(), 64 * 1024 * 1024)
    };
    let mut buffer = DiskBuffer::open(&unsynced).unwrap();
    let ids = append(&mut buffer, 5000);
    let files = segments(dir.path());
    assert!(files.len() >= 3, "{} segments", files.len());
    for file in &files {
        let len = fs::metadata(file).unwrap().len();
        assert!(
            len <= 128 * 1024 + 200,
            "{} has {len} bytes",
            file.display()
        );
    }
    for id in ids {
        buffer.ack(id).unwrap();
    }
    assert_eq!(segments(dir.path()).len(), 1);
    assert_eq!(buffer.stats().depth, 0);
}

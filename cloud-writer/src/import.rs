//! `cloud-writer import FILE.jsonl`: backfill from a file, one JSON object per line,
//! each a wire message or a latest/history document (as exported from a container).
//!
//! Lines go through the same pipeline and sink as live messages (validation,
//! coalescing, newest-wins), so an import never moves a drone's document backwards.
//! The file is trusted for identity: the device id is the line's own `deviceId`.
//! A line that is neither form is counted as invalid; the import goes on; the counts
//! say what became of every line.

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::metrics::Metrics;
use crate::source::queue::QueueSender;
use crate::source::{Ack, Message, Source, SourceControl, SourceError};
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Deserialize;
use telemetry::{Gnss, Position};

/// A source reading a JSONL file.
pub struct FileSource {
    path: PathBuf,
    metrics: Arc<Metrics>,
    on_read: Box<dyn Fn(u64) + Send>,
}

impl FileSource {
    /// Reads `path`, calling `on_read` with the bytes of every line read (for a progress
    /// display).
    pub fn new(
        path: PathBuf,
        metrics: Arc<Metrics>,
        on_read: impl Fn(u64) + Send + 'static,
    ) -> Self {
        FileSource {
            path,
            metrics,
            on_read: Box::new(on_read),
        }
    }
}

/// A document line's fields (as the writer stores them).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DocumentLine {
    device_id: String,
    seq: u64,
    device_time: String,
    location: Point,
    alt_m: Option<f64>,
    heading_deg: Option<f64>,
    speed_mps: Option<f64>,
    battery_pct: Option<u8>,
    /// `null` in a latest document patched with a position without health.
    #[serde(default)]
    gnss: Option<Gnss>,
}

#[derive(Deserialize)]
struct Point {
    coordinates: [f64; 2],
}

/// Only the identity of a wire message line.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireLine {
    device_id: Option<String>,
}

/// The identity and wire payload of one line: a document becomes the wire message of
/// its position; anything else is passed on as it is (and judged by the pipeline).
pub fn line_to_message(line: &[u8]) -> (String, Bytes) {
    if let Ok(doc) = serde_json::from_slice::<DocumentLine>(line) {
        if let Ok(ts) = telemetry::time::parse_rfc3339(&doc.device_time) {
            let position = Position {
                device_id: doc.device_id.clone(),
                seq: doc.seq,
                ts,
                lat: doc.location.coordinates[1],
                lon: doc.location.coordinates[0],
                alt_m: doc.alt_m,
                heading_deg: doc.heading_deg,
                speed_mps: doc.speed_mps,
                battery_pct: doc.battery_pct,
                gnss: doc.gnss.unwrap_or_default(),
            };
            if let Ok(bytes) = position.encode() {
                return (doc.device_id, Bytes::from(bytes));
            }
        }
    }
    let identity = serde_json::from_slice::<WireLine>(line)
        .ok()
        .and_then(|w| w.device_id)
        .unwrap_or_default();
    (identity, Bytes::copy_from_slice(line))
}

impl Source for FileSource {
    fn kind(&self) -> &'static str {
        "file"
    }

    fn run(
        self: Box<Self>,
        tx: QueueSender,
        control: SourceControl,
    ) -> BoxFuture<'static, Result<(), SourceError>> {
        async move {
            let FileSource {
                path,
                metrics,
                on_read,
            } = *self;
            let file = std::fs::File::open(&path)
                .map_err(|e| SourceError::Config(format!("cannot open {}: {e}", path.display())))?;
            let mut reader = std::io::BufReader::new(file);
            let mut line = Vec::with_capacity(512);
            metrics.set_source_connected(true);
            loop {
                if control.stop.is_cancelled() {
                    break;
                }
                line.clear();
                let read = reader
                    .read_until(b'\n', &mut line)
                    .map_err(|e| SourceError::Failed(format!("reading {}: {e}", path.display())))?;
                if read == 0 {
                    break;
                }
                on_read(read as u64);
                let trimmed = line.trim_ascii();
                if trimmed.is_empty() {
                    continue;
                }
                let (identity, payload) = line_to_message(trimmed);
                metrics.received();
                let message = Message {
                    identity,
                    payload,
                    enqueued_time: None,
                    received_at: Instant::now(),
                    kind: Default::default(),
                    ack: Ack::none(),
                };
                if tx.send(message).await.is_err() {
                    break;
                }
            }
            Ok(())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_become_wire_messages() {
        let doc = br#"{"id":"d1","deviceId":"d1","kind":"latest","schemaVersion":1,"seq":4,"deviceTime":"2026-11-22T09:15:02.500Z","deviceTimeMs":1795338902500,"location":{"type":"Point","coordinates":[-122.25,47.5]},"altM":10.0}"#;
        let (identity, payload) = line_to_message(doc);
        assert_eq!(identity, "d1");
        let position = telemetry::wire::decode(&payload).unwrap();
        assert_eq!(
            (position.lat, position.lon, position.seq),
            (47.5, -122.25, 4)
        );
        assert_eq!(position.alt_m, Some(10.0));
        assert!(position.gnss.is_empty());
    }

    #[test]
    fn a_document_health_comes_back_and_a_patched_null_is_none() {
        let doc = br#"{"id":"d1","deviceId":"d1","kind":"latest","schemaVersion":1,"seq":4,"deviceTime":"2026-11-22T09:15:02.500Z","deviceTimeMs":1795338902500,"location":{"type":"Point","coordinates":[-122.25,47.5]},"gnss":{"fix":"rtkFloat","sats":11,"hAccM":0.3}}"#;
        let position = telemetry::wire::decode(&line_to_message(doc).1).unwrap();
        assert_eq!(position.gnss.fix, Some(telemetry::FixType::RtkFloat));
        assert_eq!(position.gnss.sats, Some(11));
        assert_eq!(position.gnss.h_acc_m, Some(0.3));
        let patched = br#"{"id":"d1","deviceId":"d1","kind":"latest","schemaVersion":1,"seq":5,"deviceTime":"2026-11-22T09:15:07.500Z","deviceTimeMs":1795338907500,"location":{"type":"Point","coordinates":[-122.25,47.5]},"gnss":null}"#;
        let position = telemetry::wire::decode(&line_to_message(patched).1).unwrap();
        assert_eq!(position.seq, 5);
        assert!(position.gnss.is_empty());
    }

    #[test]
    fn wire_messages_and_garbage_pass_through() {
        let wire =
            br#"{"v":1,"deviceId":"d2","seq":1,"ts":"2026-11-22T09:15:02Z","lat":1,"lon":2}"#;
        let (identity, payload) = line_to_message(wire);
        assert_eq!(identity, "d2");
        assert_eq!(&payload[..], &wire[..]);
        let (identity, payload) = line_to_message(b"not json");
        assert_eq!(identity, "");
        assert_eq!(&payload[..], b"not json");
    }
}

//! The dead-letter file: one JSON line per alert a destination did not take, with the
//! destination, the reason and the whole CloudEvent, appended and flushed to disk before the
//! range's continuation moves past it. Re-send with any tool that reads JSON lines.

use std::io::Write as _;
use std::path::PathBuf;

use serde_json::{Value, json};
use tokio::sync::Mutex;

/// The file, appended to by every range.
#[derive(Debug)]
pub struct DeadLetter {
    path: PathBuf,
    lock: Mutex<()>,
}

impl DeadLetter {
    /// Appends to the file at `path` (created when missing).
    pub fn new(path: PathBuf) -> Self {
        DeadLetter {
            path,
            lock: Mutex::new(()),
        }
    }

    /// Appends one line and syncs it to disk.
    pub async fn write(
        &self,
        destination: &str,
        reason: &str,
        event: &Value,
    ) -> std::io::Result<()> {
        let line = json!({
            "deadLetteredAt": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "destination": destination,
            "reason": reason,
            "event": event,
        });
        let mut text = serde_json::to_vec(&line).expect("a line serializes");
        text.push(b'\n');
        let _one_writer = self.lock.lock().await;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            file.write_all(&text)?;
            file.sync_data()
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

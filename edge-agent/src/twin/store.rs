//! The settings applied from the twin, kept in the buffer directory (`twin.json`) so that
//! they hold across restarts and outages: replaced whole on every change
//! ([`crate::atomic_file`]). A file that cannot be read is reported and set aside: the
//! agent then runs on its local settings until the twin read at its next connection.

use std::path::{Path, PathBuf};

use super::state::Stored;

/// The file's name in the buffer directory.
pub(crate) const TWIN_FILE: &str = "twin.json";

/// Where one agent keeps what it applied.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    path: PathBuf,
}

impl Store {
    /// The store in `dir` (the buffer directory).
    pub(crate) fn new(dir: &Path) -> Store {
        Store {
            path: dir.join(TWIN_FILE),
        }
    }

    /// What was kept; nothing if there is no file or it cannot be read (logged).
    pub(crate) fn load(&self) -> Stored {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Stored::default(),
            Err(err) => {
                tracing::error!(%err, path = %self.path.display(), "the settings applied from the twin cannot be read: the local ones apply until the twin is read");
                return Stored::default();
            }
        };
        serde_json::from_slice(&text).unwrap_or_else(|err| {
            tracing::error!(%err, path = %self.path.display(), "the settings applied from the twin are damaged: the local ones apply until the twin is read");
            Stored::default()
        })
    }

    /// Keeps `stored`; a failure is logged (the settings hold until the agent restarts).
    pub(crate) fn save(&self, stored: &Stored) {
        let text = serde_json::to_vec_pretty(stored).expect("the twin state serializes");
        if let Err(err) = crate::atomic_file::replace(&self.path, &text) {
            tracing::error!(%err, path = %self.path.display(), "the settings applied from the twin were not kept: they hold until the agent restarts");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::twin::desired::{Ack, Property};

    #[test]
    fn what_is_kept_is_read_back_and_damage_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        assert_eq!(store.load(), Stored::default());
        let mut stored = Stored {
            version: Some(4),
            ..Stored::default()
        };
        stored.acks.insert(
            Property::ReportInterval,
            Ack {
                value: serde_json::json!(1),
                ac: 200,
                av: 4,
                ad: "applied".into(),
            },
        );
        store.save(&stored);
        assert_eq!(store.load(), stored);
        std::fs::write(dir.path().join(TWIN_FILE), b"{\"version\": ").unwrap();
        assert_eq!(store.load(), Stored::default());
    }
}

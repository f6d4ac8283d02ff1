//! A value read from files (the TLS pair, the API key file) and read again whenever one of
//! them changes, checked where the value is used.
//!
//! Every use compares the files' inode, modification and change times and length with those
//! last read (a `stat` a file, microseconds): a secret volume's atomic swap and a renamed file
//! change the inode, a rewrite the times and length, a `chmod` the change time. A version that
//! does not load (half written, unreadable, invalid) leaves the last good value in service; it
//! is logged, counted, and read again once the files change again. A file that cannot be
//! looked at (moved away mid-rotation) keeps the value in hand the same way.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;

/// What identifies one version of a file: inode, modification and change times, length.
type Stamp = Vec<(u64, i64, i64, i64, i64, u64)>;

/// The files' stamp; `None` if one of them cannot be looked at.
fn stamp(paths: &[PathBuf]) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    paths
        .iter()
        .map(|path| {
            let m = std::fs::metadata(path).ok()?;
            Some((
                m.ino(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
                m.len(),
            ))
        })
        .collect()
}

/// The loader of a [`Reloading`] value.
type Loader<T> = Box<dyn Fn() -> Result<T, String> + Send + Sync>;

/// The value in service and the files' stamp it was read at.
struct Loaded<T> {
    stamp: Option<Stamp>,
    value: Arc<T>,
}

/// A value read from `paths` by a loader, read again when they change.
pub(crate) struct Reloading<T> {
    /// What the files hold, for the log (`TLS certificate`, `API key file`).
    what: &'static str,
    paths: Vec<PathBuf>,
    load: Loader<T>,
    loaded: Mutex<Loaded<T>>,
    /// Versions that did not load (or files that could not be looked at).
    failures: Counter,
}

impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("what", &self.what)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl<T> Reloading<T> {
    /// Reads the value now with `load` (its error, if any, is the caller's to report) and
    /// again whenever one of `paths` changes.
    pub(crate) fn start<E: std::fmt::Display>(
        what: &'static str,
        paths: Vec<PathBuf>,
        load: impl Fn() -> Result<T, E> + Send + Sync + 'static,
    ) -> Result<Self, E> {
        let stamp = stamp(&paths);
        let first = load()?;
        Ok(Self::at(what, paths, stamp, first, load))
    }

    /// `first`, read from `paths` a moment ago (a change made since is seen at the next
    /// change), and read again with `load` whenever one of them changes from now on.
    pub(crate) fn keeping<E: std::fmt::Display>(
        what: &'static str,
        paths: Vec<PathBuf>,
        first: T,
        load: impl Fn() -> Result<T, E> + Send + Sync + 'static,
    ) -> Self {
        let stamp = stamp(&paths);
        Self::at(what, paths, stamp, first, load)
    }

    fn at<E: std::fmt::Display>(
        what: &'static str,
        paths: Vec<PathBuf>,
        stamp: Option<Stamp>,
        first: T,
        load: impl Fn() -> Result<T, E> + Send + Sync + 'static,
    ) -> Self {
        Self {
            what,
            paths,
            load: Box::new(move || load().map_err(|e| e.to_string())),
            loaded: Mutex::new(Loaded {
                stamp,
                value: Arc::new(first),
            }),
            failures: Counter::default(),
        }
    }

    /// The value read from the files' newest version that loads.
    pub(crate) fn current(&self) -> Arc<T> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamp(&self.paths);
        if now == loaded.stamp {
            return loaded.value.clone();
        }
        let was_readable = loaded.stamp.is_some();
        loaded.stamp = now;
        if loaded.stamp.is_none() {
            if was_readable {
                self.failures.inc();
                tracing::warn!(what = self.what, files = ?self.paths, "cannot look at the files: keeping the values in hand");
            }
            return loaded.value.clone();
        }
        match (self.load)() {
            Ok(value) => {
                tracing::info!(what = self.what, files = ?self.paths, "reloaded");
                loaded.value = Arc::new(value);
            }
            Err(err) => {
                self.failures.inc();
                tracing::warn!(what = self.what, %err, "the files changed but do not load: keeping the previous version");
            }
        }
        loaded.value.clone()
    }

    /// The count of versions that did not load, for the metrics.
    pub(crate) fn failures(&self) -> Counter {
        self.failures.clone()
    }
}

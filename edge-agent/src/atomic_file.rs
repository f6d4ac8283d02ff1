//! Replacing a small state file whole, so that a power cut leaves the old content or the
//! new one, never a mix: the DPS assignment and the settings applied from the twin.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Writes `content` to `path` through a temporary file beside it (mode 0600, synced,
/// renamed over `path`).
pub(crate) fn replace(path: &Path, content: &[u8]) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".new");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(content)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}

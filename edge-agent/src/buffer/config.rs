//! The store-and-forward buffer's settings, as the agent runs it.

use std::path::PathBuf;

/// The store-and-forward buffer (`src/buffer/mod.rs` describes the on-disk format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferConfig {
    /// The directory of segment files (`BUFFER_DIR`).
    pub dir: PathBuf,
    /// The most bytes the segment files may hold; beyond it the oldest are dropped.
    pub max_bytes: u64,
    /// `fsync` every appended record (on by default; a power cut then loses at most the
    /// record being written). Off trades durability for throughput, e.g. in simulations.
    pub fsync: bool,
}

/// The smallest `BUFFER_MAX_BYTES` accepted.
pub const MIN_BUFFER_MAX_BYTES: u64 = 4096;
/// The default `BUFFER_MAX_BYTES`: 64 MiB, about two weeks of 5-second positions.
pub const DEFAULT_BUFFER_MAX_BYTES: u64 = 64 * 1024 * 1024;

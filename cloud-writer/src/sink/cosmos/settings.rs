//! The sink's settings.

use std::path::PathBuf;

use cosmos::BulkConfig;
use telemetry::StalenessPolicy;

use crate::config::NewestWins;

/// Settings of the sink.
#[derive(Debug, Clone)]
pub struct SinkSettings {
    /// How newest-wins is enforced.
    pub newest_wins: NewestWins,
    /// The staleness rule, re-applied to positions that must be retried.
    pub staleness: StalenessPolicy,
    /// Drones whose high-water mark is kept.
    pub high_water_capacity: usize,
    /// The bulk writer's settings. Its queue capacity is also the in-flight limit of the
    /// sink: positions (and history documents) from the moment the sink takes them until
    /// they are final, ETag-mode reads and parked writes included.
    pub bulk: BulkConfig,
    /// How long positions are held for their track segment before it is written
    /// (`HISTORY_HOLD`; history only): their messages stay unacknowledged meanwhile.
    pub segment_hold: std::time::Duration,
    /// The account key's file (COSMOS_KEY_FILE), read again while Cosmos DB refuses the key.
    pub key_file: Option<PathBuf>,
}

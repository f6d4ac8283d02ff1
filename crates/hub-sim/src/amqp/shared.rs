//! What the AMQP side shares across its connections and links: the hub's shared state, the
//! Event Hubs name and key, and the partitions' owners.

use super::consumer::Owners;
use crate::shared::Shared;
use std::sync::Arc;

/// What the AMQP side shares across connections.
pub(crate) struct AmqpShared {
    pub(crate) hub: Arc<Shared>,
    pub(crate) hub_name: String,
    pub(crate) key: String,
    pub(crate) owners: Owners,
    pub(crate) created_ms: i64,
}

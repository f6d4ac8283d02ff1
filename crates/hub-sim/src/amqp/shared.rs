//! What the AMQP side shares across its connections and links: the hub ([`crate::hub::Hub`]), the
//! Event Hubs name and key, the Entra ID trust, and the partitions' owners.

use super::consumer::Owners;
use super::entra::EntraAccess;
use crate::hub::Hub;
use std::sync::Arc;

/// What the AMQP side shares across connections.
pub(crate) struct AmqpShared {
    pub(crate) hub: Arc<Hub>,
    pub(crate) hub_name: String,
    pub(crate) key: String,
    pub(crate) entra: Option<Arc<EntraAccess>>,
    pub(crate) owners: Owners,
    pub(crate) created_ms: i64,
    /// Whether detaches of `$cbs` and `$management` links are answered after a hold
    /// ([`crate::HubConfig::unattached_handle_workaround`]).
    pub(crate) unattached_handle_workaround: bool,
}

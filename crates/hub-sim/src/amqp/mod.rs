//! The consumer side: the built-in Event Hubs-compatible endpoint over AMQP 1.0, on
//! fe2o3-amqp's acceptor. `server` listens and dispatches links, `sasl` opens
//! connections, `requests` answers CBS and management, [`entra`] checks Entra ID tokens put
//! on CBS, [`consumer`] reads addresses, filters and owner levels and shapes events, `links`
//! runs each link, `shared` is what they all share.

pub mod consumer;
pub mod entra;
pub(crate) mod links;
pub(crate) mod requests;
pub(crate) mod sasl;
pub(crate) mod server;
pub(crate) mod shared;

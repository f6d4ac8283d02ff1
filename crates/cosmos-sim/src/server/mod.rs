//! The HTTP side of the endpoint: accepting connections and taking each request through the
//! injected faults, the signature check and the route to its handler (account, databases,
//! containers, range map, documents, batches, queries, and the `/_admin/` endpoints), and
//! answering with the service's headers (`x-ms-request-charge` on every reply). It keeps no
//! state of its own: what a request reads or changes is the endpoint's state.

mod admin;
mod auth;
mod batch;
mod change_feed;
mod faults;
mod headers;
mod listen;
mod operation;
mod point;
mod query;
mod reply;
mod resources;
mod routes;

pub(crate) use listen::serve;

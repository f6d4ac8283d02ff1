//! The HTTP side of the endpoint, one concern per file: [`listen`] accepts connections and runs
//! each request through fault injection ([`faults`]), the signature check ([`auth`]) and the
//! router ([`routes`]); the handlers are [`resources`] (account, databases, containers, range
//! map), [`point`] (one document), [`batch`] and [`query`]; [`operation`] builds a document
//! operation from a request's parts; [`reply`] writes responses with the service's headers
//! (`x-ms-request-charge` on every one); [`admin`] serves `/_admin/`.

mod admin;
mod auth;
mod batch;
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

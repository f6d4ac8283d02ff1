//! The alerter: follows the positions container's change feed with leases (any number of
//! replicas share its partition key ranges, each change judged once), judges each drone's
//! new position against the rules (geofence enter and leave, silent drones, low batteries),
//! and delivers the alerts, at least once, as CloudEvents 1.0 to webhooks and Event Grid.
//!
//! Its modules are private; the root has what the binary, the tests and the fleet demo use:
//! [`Settings`] and [`AlerterConfig`], [`run`], [`Rules`], and the webhooks' [`signature`].
//!
//! - `config`, settings, one file per group;
//! - `rules`, the rules file, read again when it changes;
//! - `alert`, an alert, its stable id and its CloudEvent;
//! - `judge`, the judging, a pure state machine over a drone's state;
//! - `state`, the drones' states (and outboxes) in the lease container;
//! - `record`, the alerts delivered, kept a week for fleet-api's `/api/alerts`;
//! - `lease`, the lease documents and the balancing;
//! - `shared`, what the followers share: the clients, rules, fences, delivery; a held lease;
//! - `processor`, renewing and taking leases, one follower per lease;
//! - `range`, a range's follower (feed, judge, deliver, state, checkpoint);
//! - `silent`, the search for silent drones;
//! - `deliver`, webhooks (signed), Event Grid, retries, the dead-letter file;
//! - `metrics`, `/metrics`.

mod alert;
mod app;
mod config;
mod deliver;
mod judge;
mod lease;
mod metrics;
mod processor;
mod range;
mod record;
mod rules;
mod shared;
mod silent;
mod state;

pub use app::run;
pub use config::{AlerterConfig, FeedStart, Settings};
pub use deliver::{SIGNATURE_HEADER, signature};
pub use rules::Rules;

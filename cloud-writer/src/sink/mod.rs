//! Sinks: where the pipeline's positions go. A sink takes each coalesced position through
//! the pipeline's contract ([`crate::pipeline::Sink`]), drives it to a final outcome
//! (written, superseded, stale or refused, each counted) and only then acknowledges its
//! message. The one sink is Cosmos DB's ([`cosmos`]), under the newest-wins rule.

pub mod cosmos;

pub use cosmos::{CosmosSink, Encoder, HistoryFormat, SinkSettings, policy_cost};

//! Sinks: where positions go. [`cosmos`] writes them to Cosmos DB under the newest-wins
//! rule; [`encode`] builds the bytes; [`high_water`] remembers what is known stored.

pub mod cosmos;
pub mod encode;
pub mod high_water;

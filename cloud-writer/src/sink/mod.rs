//! Sinks: where positions go. [`cosmos`] writes them to Cosmos DB under the newest-wins
//! rule; [`encode`] builds the bytes; [`high_water`] remembers what is known stored;
//! [`stored`] reads what is stored (ETag mode); [`refusal`] says what a refusal means and
//! [`hold`] holds the stream while Cosmos DB refuses every write.

pub mod cosmos;
pub mod encode;
pub mod high_water;
pub mod hold;
pub mod refusal;
pub mod stored;

//! What a caller is told when Cosmos DB fails a request. The caller gets what it can act on;
//! the detail (status, message, the account's URL in a transport error) goes to the log only.

/// The message of a failed request's body (`"error": "cosmos"`, 502).
pub(crate) const FAILED: &str = "the fleet's database did not answer as expected; try again later, and tell the operator if it persists (the server log has the detail)";

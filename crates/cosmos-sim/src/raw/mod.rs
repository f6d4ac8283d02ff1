//! The write path over raw JSON bytes: finding a document's `id`, partition key value and
//! system properties by scanning its top level instead of building a `serde_json::Value`, and
//! writing numbers, hex and ETags straight into response and document buffers.
//!
//! The scanner expects JSON that was already validated (request bodies go through
//! `serde_json::value::RawValue` first); on anything it does not expect it answers `None`, and
//! the caller takes the parsing path instead.

mod batch;
mod reader;
mod set_patch;
mod write;

pub use batch::{BatchError, BatchOp, read_batch};
pub use reader::{Fields, Invalid, document};
pub use set_patch::{SetPatch, apply_sets, read_members, read_set_patch};
pub use write::{EtagText, is_plain, open_object, plain_str, push_charge, push_hex, push_u64};

#[cfg(test)]
mod tests;

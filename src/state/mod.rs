//! The state file: its schema, the lock, atomic saves and the no-op journal.

pub mod journal;
pub mod schema;
pub mod storage;
pub mod store;

pub use schema::*;

//! The state file: its schema, the lock, atomic saves, the no-op journal
//! and the decision journal.

pub mod bounds;
pub mod decisions;
pub mod files;
pub mod journal;
pub mod limits;
pub mod manifest;
pub mod records;
pub mod safe_fs;
pub mod schema;
pub mod shards;
pub mod storage;
pub mod store;
pub mod ts;

pub use schema::*;

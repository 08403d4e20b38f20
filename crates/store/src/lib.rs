//! The state file on disk: the lock, atomic saves, the shards and the
//! manifest, the no-op journal and the decision journal. It re-exports the
//! records it stores (sentinel-core) and the safe opens it uses
//! (sentinel-io), so a `state::X` above names one thing wherever it lives.

pub mod decisions;
pub mod journal;
pub mod manifest;
pub mod shards;
pub mod storage;
pub mod store;

pub use sentinel_core::state::*;
pub use sentinel_io::safe_fs;

//! The shared leaves of sentinel's I/O: files opened without following a
//! link (`safe_fs`) and the one HTTP agent every peer is reached through
//! (`http`). The store, the sources and the advisor all build on them.

pub mod http;
pub mod safe_fs;

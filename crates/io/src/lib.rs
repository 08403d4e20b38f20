//! The shared leaves of sentinel's I/O: files opened without following a
//! link (`safe_fs`), the one HTTP agent every peer is reached through
//! (`http`), and the settings every git sentinel starts runs with
//! (`git_env`). The store, the sources and the advisor all build on them.

pub mod git_env;
pub mod http;
pub mod safe_fs;

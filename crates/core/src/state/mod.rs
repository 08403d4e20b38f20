//! What a state file holds: its schema, the records of each file and of the
//! gates, and the bounds every count keeps. The store (sentinel-store) reads
//! and writes them; the gates decide over them.

pub mod bounds;
pub mod files;
pub mod limits;
pub mod records;
pub mod schema;
pub mod ts;

pub use schema::*;

//! sentinel: a one-shot guard that keeps a scheduled code-maintenance agent from going in circles.
//!
//! This crate is the top layer: the commands, the tick, the reports and the
//! patches. The layers below are crates of their own (ARCHITECTURE.md); they
//! are re-exported under the names the code above them uses.

pub use sentinel_advisor as llm;
pub use sentinel_core::{address, gate, redact};
pub use sentinel_io::http;
pub use sentinel_source as source;
pub use sentinel_store as state;

pub mod app;
pub mod branch;
pub mod cli;
pub mod clone;
pub mod command;
pub mod exit;
pub mod fleet;
pub mod mr_report;
pub mod patch;
pub mod publish;
pub mod record;
pub mod report;
pub mod reset;
pub mod simulate;
pub mod tick;

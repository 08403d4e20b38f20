//! sentinel: a one-shot guard that keeps a scheduled code-maintenance agent from going in circles.

pub mod address;
#[cfg(test)]
mod alloc_count;
pub mod app;
pub mod branch;
pub mod cli;
pub mod clone;
pub mod command;
pub mod exit;
pub mod fleet;
pub mod gate;
pub mod http;
pub mod llm;
pub mod mr_report;
pub mod patch;
pub mod publish;
pub mod record;
pub mod redact;
pub mod report;
pub mod reset;
pub mod simulate;
pub mod source;
pub mod state;
pub mod tick;

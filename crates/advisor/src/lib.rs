//! The advisor: the model's HTTP client and the agent's contained runs. How
//! provider errors are classified, how long to wait and what calls cost are
//! decisions of the core (sentinel-core's `llm`), re-exported here.

pub mod admin;
pub mod agent;
pub mod agent_user;
pub mod bounds;
pub mod client;
pub mod contain;
pub mod given_env;
pub mod kernel_sandbox;
pub mod peers;
pub mod repeat;
pub mod withhold;
pub mod worktree;

pub use sentinel_core::llm::{prices, protocol, waits};

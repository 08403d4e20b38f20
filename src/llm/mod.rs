//! The advisor: the model's HTTP client and the agent's contained runs,
//! how provider errors are classified and retried, and what calls cost.

pub mod admin;
pub mod agent;
pub mod agent_user;
pub mod bounds;
pub mod client;
pub mod contain;
pub mod given_env;
pub mod kernel_sandbox;
pub mod peers;
pub mod prices;
pub mod protocol;
pub mod repeat;
pub mod waits;
pub mod withhold;
pub mod worktree;

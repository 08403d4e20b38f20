//! The advisor's answers, error classes, circuit and usage, as the state and
//! the decision journal keep them; `llm` classifies, retries and prices.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What kind of failure a call ended in; decides retries, backoff and circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Timeout,
    Network,
    Server,
    RateLimit,
    Quota,
    /// A spending limit set in front of the provider (a proxy's key, team or
    /// provider budget): like a quota, it does not pass by the minute.
    Budget,
    Auth,
    Request,
    /// A request only this file makes impossible (too long for the context,
    /// filtered, too large): the provider is fine for every other file.
    FileRequest,
    BadResponse,
    Unknown,
}

/// The provider is held until `until`; every call before then is skipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Circuit {
    pub class: Class,
    pub reason: String,
    pub until: DateTime<Utc>,
    pub advice: String,
    /// When it opened: a clock that went back before it must not stretch it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened: Option<DateTime<Utc>>,
    /// Circuits before this one whose first call after them failed again,
    /// with no answer in between: each doubled the hold (see
    /// `protocol::escalated`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub streak: u32,
}

/// What the agent last ran inside, as the tick that ran it saw it: `stats`
/// says it, since the job's log with the tick's own line may be gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSandbox {
    /// `landlock` or `off`.
    pub sandbox: String,
    /// The Landlock ABI enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abi: Option<i32>,
    /// `fully`, `partly` (ABI below 6: writes and ptrace only) or `no`.
    pub enforced: String,
    /// Why there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The user it ran as (`--agent-user`), when not sentinel's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub at: DateTime<Utc>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Minor,
    Major,
    Critical,
    Blocker,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    pub line: u64,
    pub severity: Severity,
    pub message: String,
}

/// Tokens of one call, as the provider billed them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// All prompt tokens, the cached ones included.
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// Reasoning tokens included.
    pub completion_tokens: u64,
}

//! The advisor's spend, as the state keeps it; `gate::budget` admits and
//! settles against it.

use serde::{Deserialize, Serialize};

/// What the advisor has spent: today (UTC) and over the instance's life.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Budget {
    /// The UTC day the daily figures belong to.
    pub day: Option<chrono::NaiveDate>,
    pub calls_today: u64,
    /// Cost settled from real usage today (USD).
    pub measured_today: f64,
    /// Cost of today's calls whose model has no price: the configured per-call estimate (USD).
    pub estimated_today: f64,
    pub lifetime_calls: u64,
    pub lifetime_measured: f64,
    pub lifetime_estimated: f64,
    /// Calls refused because they would cross the limit (lifetime).
    pub refusals: u64,
    /// Calls whose cost was above the per-call ceiling and was counted at it
    /// (lifetime): a tick that adds one says so.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub capped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

//! The per-day spend history and the advisories of `sentinel costs`, as the
//! state keeps them; `gate::costs` compares them with the bill.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// What sentinel itself counted on one UTC day.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DaySpend {
    /// Calls settled in the budget (the budget's `calls_today` of that day).
    #[serde(default)]
    pub calls: u64,
    /// Cost settled from the responses' usage (USD).
    #[serde(default)]
    pub measured: f64,
    /// Cost of calls to models without a price: the per-call figure (USD).
    #[serde(default)]
    pub estimated: f64,
    /// HTTP attempts, retries included: the most requests the provider can
    /// have billed for sentinel's calls.
    #[serde(default)]
    pub attempts: u64,
    /// Calls asked of each model.
    #[serde(default)]
    pub models: BTreeMap<String, u64>,
    /// Settled calls by where their cost came from (`reported` by the
    /// server, `price_table`, `per_call`, `reservation`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, u64>,
    /// Attempts that timed out, counted as estimated calls at the
    /// reservation (included in `calls` and `estimated`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timed_out: u64,
    /// What they were counted at (USD).
    #[serde(default, skip_serializing_if = "is_zero_usd")]
    pub timed_out_usd: f64,
    /// The highest real cost of one call (reported or priced from usage)
    /// per model asked: a reservation for that model is at least the
    /// highest of the last 7 days (`gate::costs::real_price`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_call_usd: BTreeMap<String, f64>,
    /// Answers a proxy gave from another model, as `asked -> answered`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fallbacks: BTreeMap<String, u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_usd(v: &f64) -> bool {
    *v == 0.0
}

impl DaySpend {
    /// Requests sentinel may have caused: every attempt, or at least every settled call.
    pub fn requests(&self) -> u64 {
        self.calls.max(self.attempts)
    }

    pub fn cost(&self) -> f64 {
        self.measured + self.estimated
    }
}

/// A finding of `sentinel costs`, kept in the state and shown by `stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advisory {
    /// One of `over-daily-budget`, `estimate-too-low`, `unexpected-model`, `foreign-calls`.
    pub kind: String,
    /// The UTC day of the bill it is about.
    pub day: NaiveDate,
    /// What happened, with the numbers.
    pub message: String,
    /// When a costs run found it (first found, while its message stays the same).
    pub found: DateTime<Utc>,
}

//! The autonomy allowance's memory and its triggers, as the state keeps
//! them; `gate::autonomy` admits against them.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    UnresolvedRollback,
    WrongPrediction,
    DependencyDrift,
    OpenProposal,
    /// Every external signal, whatever its own kind (that kind goes into `detail`).
    RuntimeError,
}

impl TriggerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::UnresolvedRollback => "unresolved_rollback",
            TriggerKind::WrongPrediction => "wrong_prediction",
            TriggerKind::DependencyDrift => "dependency_drift",
            TriggerKind::OpenProposal => "open_proposal",
            TriggerKind::RuntimeError => "runtime_error",
        }
    }
}

/// A concrete fact that justifies thinking about a file again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trigger {
    #[serde(default)]
    pub path: String,
    pub kind: TriggerKind,
    /// What makes this trigger this trigger (e.g. "streak=2", the resolution time,
    /// the proposal fingerprint, the signal's kind and message).
    #[serde(default)]
    pub detail: String,
    pub ts: DateTime<Utc>,
}

/// What the allowance remembers between runs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AutonomyState {
    /// The UTC day `used_today` belongs to.
    pub day: Option<NaiveDate>,
    pub used_today: u32,
    /// The last reconsideration (for the spacing window).
    pub last_ts: Option<DateTime<Utc>>,
    /// Last reconsideration per file (for the 24 h cooldown); entries older than
    /// 24 h are dropped on spend.
    pub cooldowns: BTreeMap<String, DateTime<Utc>>,
    /// Answered trigger fingerprints per file, oldest first; bounded to
    /// `ANSWERED_PER_FILE` per file and `ANSWERED_FILES` files.
    pub answered: BTreeMap<String, Vec<String>>,
    /// Reconsiderations started and not refunded, over the instance's life.
    pub lifetime: u64,
    /// The last admission's reason, for stats.
    pub last_reason: Option<String>,
}

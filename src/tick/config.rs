//! The validated settings of one tick, built by the command line or by `simulate`.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use crate::gate::admission;
use crate::gate::autonomy::{self, Trigger};
use crate::gate::lifecycle;
use crate::gate::policy::{self, EvidenceInputs};
use crate::llm::prices::Price;

#[derive(Debug, Clone)]
pub struct TickConfig {
    pub state: PathBuf,
    /// The revision listed when the head is unknown (the branch, or `HEAD`).
    pub rev: String,
    /// Paid consultations (model or agent calls) per tick; 0 = unlimited.
    /// Local decisions are free and never counted.
    pub batch: usize,
    /// File reads per tick; 0 = unlimited. Reads are free on a local clone
    /// but cost one API request each on GitLab.
    pub max_reads: usize,
    pub dry_run: bool,
    /// Most files remembered; the oldest `last_ts` is evicted past it.
    pub max_files: usize,
    /// Files larger than this are fingerprinted by content id, not read.
    pub max_file_bytes: u64,
    /// The evidence version: rules and policy (`current_evidence`).
    pub evidence: String,
    /// Evidence versions of earlier states that mean the same rules and
    /// policy (`legacy_evidence`): carried over, not judged again.
    pub legacy_evidence: Vec<LegacyEvidence>,
    pub now: DateTime<Utc>,
    /// `None`: the advisor is off and judgement is handed over as `needs_review`.
    pub advisor: Option<AdvisorSettings>,
    /// `--lock` patterns: matching files are never judged and never a target.
    pub locks: Vec<String>,
    /// The autonomy allowance (off unless configured, and only with an advisor).
    pub autonomy: autonomy::Settings,
    /// External signals (`--signals`), already parsed; stale ones dropped.
    pub signals: Vec<Trigger>,
    /// Bounds of observation mode's open watches and resolved log.
    pub watch_limit: usize,
    pub resolved_limit: usize,
    /// What started this tick; triggered ticks are admitted once per window.
    pub trigger: admission::Trigger,
    pub min_interval: chrono::Duration,
    /// Where to write the Code Quality report of open proposals (on wake).
    pub codequality: Option<PathBuf>,
    /// The project's web address, for line links on the dashboard.
    pub web_url: Option<String>,
    /// Commit the advisor's proposed content to the sandbox branch.
    pub patches: bool,
    /// Move a state of another scope to this tick's, re-listing everything.
    pub rescope: bool,
    /// Rewrites of one file an agent may make in 7 days; 0 = unlimited.
    pub max_rewrites: u32,
}

impl TickConfig {
    pub(crate) fn locked(&self, path: &str) -> bool {
        lifecycle::locked(path, &self.locks)
    }
}

/// How the advisor may spend.
#[derive(Debug, Clone)]
pub struct AdvisorSettings {
    /// Who judges, e.g. `openai:gpt-4o-mini`: recorded in every decision it
    /// makes, so a decision of another model is judged again, once.
    pub id: String,
    /// USD per UTC day, counted from real usage.
    pub daily_budget: f64,
    /// The model's price; `None` uses `per_call` and flags the cost as estimated.
    pub price: Option<Price>,
    pub per_call: f64,
    /// The per-call figure behind a proxy, which forwards to a paid provider
    /// even on a loopback URL (where `per_call` may be 0).
    pub proxied_per_call: f64,
    pub max_tokens: u64,
    /// What the project's fleet shares with it, when it is ticked as one.
    pub fleet: Option<FleetShare>,
    /// What an agent runs inside (`None`: no agent, or a dry run); kept in
    /// the state by a tick that called it.
    pub agent_sandbox: Option<crate::state::records::llm::AgentSandbox>,
}

/// A project's place in its fleet: its id, and the book every project of
/// the fleet reads and writes while it ticks (they may tick at once).
#[derive(Debug, Clone)]
pub struct FleetShare {
    pub id: u64,
    pub book: std::sync::Arc<std::sync::Mutex<FleetBook>>,
    /// Held through a call to the model: the fleet's projects tick at once,
    /// but call one after the other, so each sees the budget and the
    /// circuit the call before it left (a quota wall costs one call).
    pub calls: std::sync::Arc<std::sync::Mutex<()>>,
    /// `--project-budget`: the most this project may spend a day, within
    /// the fleet's budget.
    pub project_budget: Option<f64>,
}

/// What a fleet's projects share: `--daily-budget` is one budget for all of
/// them, and a circuit one project opened holds the provider for every
/// other. Kept across runs in the fleet's ledger (`fleet::ledger`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetBook {
    /// The UTC day `spent` counts.
    #[serde(default)]
    pub day: Option<chrono::NaiveDate>,
    /// Each project's spend on `day` (USD), by numeric id.
    #[serde(default)]
    pub spent: std::collections::BTreeMap<u64, f64>,
    /// The provider's circuit as a project last left it open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit: Option<crate::llm::protocol::Circuit>,
    /// The budget this ledger's fleet (or shard) had when last written:
    /// `--daily-budget` over the shards, said by `stats`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<FleetBudget>,
    /// What calls under way reserved, by project: never saved.
    #[serde(skip)]
    pub pending: std::collections::BTreeMap<u64, f64>,
}

/// A shard's share of the fleet's budget: `daily_budget / shards`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetBudget {
    /// `--daily-budget`, the whole fleet's.
    pub daily_budget: f64,
    /// This ledger's shard, `[k, n]`.
    pub shard: (u32, u32),
    /// This shard's share, USD a day.
    pub share: f64,
    /// `--project-budget`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_budget: Option<f64>,
}

impl FleetBook {
    /// What the fleet's other projects spent today or hold for a call.
    pub fn others(&self, id: u64) -> f64 {
        let sum = |m: &std::collections::BTreeMap<u64, f64>| -> f64 {
            m.iter()
                .filter(|(k, _)| **k != id)
                .map(|(_, v)| v.max(0.0))
                .sum()
        };
        sum(&self.spent) + sum(&self.pending)
    }
}

/// The evidence version of this build's rules and policy. The advisor is not
/// in it: each decision names its advisor (`Decision::by`).
pub fn current_evidence() -> String {
    policy::evidence_version(&EvidenceInputs::default())
}

/// An evidence version an earlier state may carry for this build's rules and
/// policy, and the advisor it implies for the model's decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyEvidence {
    pub evidence: String,
    /// `None` for the advisor-off version: no model decided under it.
    pub by: Option<String>,
}

/// The versions earlier states carry for these rules and this policy: with
/// the advisor off, and with `model` (the configured one, on or off now).
pub fn legacy_evidence(model: &str) -> Vec<LegacyEvidence> {
    let inputs = EvidenceInputs::default();
    let by = format!("openai:{model}");
    vec![
        LegacyEvidence {
            evidence: policy::legacy_evidence_version(&inputs, "off"),
            by: None,
        },
        LegacyEvidence {
            evidence: policy::legacy_evidence_version(&inputs, &by),
            by: Some(by),
        },
    ]
}

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
    /// The evidence version: rules, policy and model (`current_evidence`).
    pub evidence: String,
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
}

impl TickConfig {
    pub(crate) fn locked(&self, path: &str) -> bool {
        self.locks.iter().any(|l| lifecycle::matches(l, path))
    }
}

/// How the advisor may spend.
#[derive(Debug, Clone)]
pub struct AdvisorSettings {
    /// USD per UTC day, counted from real usage.
    pub daily_budget: f64,
    /// The model's price; `None` uses `per_call` and flags the cost as estimated.
    pub price: Option<Price>,
    pub per_call: f64,
    pub max_tokens: u64,
}

/// The evidence version of this build's rules and policy, and of the model
/// that judges (`None`: the advisor is off).
pub fn current_evidence(model: Option<&str>) -> String {
    let model = model.map(|m| format!("openai:{m}"));
    policy::evidence_version(&EvidenceInputs {
        model: model.as_deref().unwrap_or("off"),
        ..EvidenceInputs::default()
    })
}

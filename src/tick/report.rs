//! What one tick did: the report behind the one-line verdict and `--json`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::gate::novelty::Novelty;
use crate::gate::wake::Verdict;
use crate::llm::client::Finding;
use crate::publish::WriteLog;
use crate::source::RequestCounts;
use crate::state::Outcome;

/// What happened to one file in this tick.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    pub path: String,
    pub outcome: Outcome,
    pub reason: String,
    pub novelty: Option<Novelty>,
    pub fingerprint: Option<String>,
    /// The advisor's findings, for an `evolve` outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub findings: Option<Vec<Finding>>,
}

impl FileReport {
    pub(crate) fn new(
        path: &str,
        outcome: Outcome,
        reason: String,
        novelty: Novelty,
    ) -> FileReport {
        FileReport {
            path: path.to_string(),
            outcome,
            reason,
            novelty: Some(novelty),
            fingerprint: None,
            findings: None,
        }
    }

    pub(crate) fn with_fingerprint(mut self, fp: Option<String>) -> FileReport {
        self.fingerprint = fp;
        self
    }
}

/// The verdict as reported: the wake gate's, or a refusal before it.
#[derive(Debug, Clone, Serialize)]
pub struct ReportedVerdict {
    pub wake: bool,
    pub reason: String,
    pub detail: Option<serde_json::Value>,
}

/// Everything a tick did, for the one-line summary and `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct TickReport {
    pub exit_code: u8,
    pub verdict: ReportedVerdict,
    pub head: Option<String>,
    /// The files looked at. Files left pending are listed here only with
    /// `--all-pending`; otherwise `pending_paths` names the first of them.
    pub files: Vec<FileReport>,
    pub counts: BTreeMap<&'static str, u64>,
    pub pending: u64,
    /// The paths of the files left pending by this tick, in queue order: the
    /// first `PENDING_LISTED`, or all of them with `--all-pending`.
    pub pending_paths: Vec<String>,
    pub requests: u64,
    /// Requests per kind: head, list, read, compare, history.
    pub requests_by_kind: RequestCounts,
    /// Which reader answered a git source: `gix`, or `git` for a clone gix
    /// declines; `None` for GitLab, or when the clone was not read.
    pub reader: Option<&'static str>,
    /// Waits the source and the advisor asked for, in milliseconds.
    pub slept_ms: Vec<u64>,
    /// `on` or `off`.
    pub advisor: &'static str,
    /// HTTP attempts made to the model provider (every retry counts).
    pub llm_calls: u64,
    /// Every write of this tick: what was written where (empty when
    /// nothing was written).
    pub writes: Vec<WriteLog>,
    /// The sandbox branch after this tick (patches on, a proposal open or
    /// just closed): its base on the watched branch and its commits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<super::SandboxReport>,
    pub file_reads: u64,
    pub fresh_evaluations: u64,
    pub state_written: bool,
    pub dry_run: bool,
    pub notes: Vec<String>,
    /// On an outage tick (`sha_unavailable`): the outage ticks so far, this
    /// one included, how many in a row and since when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outage: Option<crate::state::Outage>,
    /// The kernel sandbox this tick's agent runs in (with an agent only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_sandbox: Option<crate::llm::kernel_sandbox::Status>,
}

impl TickReport {
    pub(crate) fn new(exit_code: u8, verdict: ReportedVerdict, dry_run: bool) -> TickReport {
        TickReport {
            exit_code,
            verdict,
            head: None,
            files: Vec::new(),
            counts: BTreeMap::new(),
            pending: 0,
            pending_paths: Vec::new(),
            requests: 0,
            requests_by_kind: RequestCounts::default(),
            reader: None,
            slept_ms: Vec::new(),
            advisor: "off",
            llm_calls: 0,
            writes: Vec::new(),
            sandbox: None,
            file_reads: 0,
            fresh_evaluations: 0,
            state_written: false,
            dry_run,
            notes: Vec::new(),
            outage: None,
            agent_sandbox: None,
        }
    }

    /// Keep the report small: the files left pending become their count and
    /// the first `PENDING_LISTED` paths, unless `all` asks for every one in
    /// `files` and `pending_paths`.
    pub fn summarise_pending(&mut self, all: bool) {
        let pending = self
            .files
            .iter()
            .filter(|f| f.outcome == Outcome::Pending)
            .map(|f| f.path.clone());
        self.pending_paths = if all {
            pending.collect()
        } else {
            pending.take(PENDING_LISTED).collect()
        };
        if !all {
            self.files.retain(|f| f.outcome != Outcome::Pending);
        }
    }
}

/// Pending paths listed in a report without `--all-pending`.
pub const PENDING_LISTED: usize = 20;

pub(crate) fn reported(v: &Verdict) -> ReportedVerdict {
    ReportedVerdict {
        wake: v.wake,
        reason: v.reason.as_str().to_string(),
        detail: v.detail.as_ref().and_then(|d| serde_json::to_value(d).ok()),
    }
}

/// The first seven characters of a commit id, for humans.
pub fn short_id(id: &str) -> &str {
    id.get(..7).unwrap_or(id)
}

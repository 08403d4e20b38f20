//! One tick, cheapest layer first: the only place that orders effects.
//!
//! lock -> load header -> one head lookup -> verdict -> (none: count it in
//! the journal and stop) -> load the rest -> the work the reason needs ->
//! atomic save -> report.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::exit;
use crate::gate::admission;
use crate::gate::autonomy::{self, Admission, Candidate, Trigger, TriggerKind};
use crate::gate::budget;
use crate::gate::deps;
use crate::gate::lifecycle::{self, Status};
use crate::gate::novelty::{self, Novelty, Parts};
use crate::gate::observation::{self, ObserveInput};
use crate::gate::policy::{self, EvidenceInputs, hex};
use crate::gate::wake::{self, Detail, Reason, Verdict, WakeInput};
use crate::llm::client::{Action, AdviceRequest, Advisor, Finding, Outcome as CallOutcome};
use crate::llm::prices::{self, Price};
use crate::llm::protocol::{self, Circuit};
use crate::patch::{self, Patcher};
use crate::publish::{Publisher, WriteLog};
use crate::report::dashboard;
use crate::source::{Change, Entry, RequestCounts, Source, SourceError};
use crate::state::storage::{FileStorage, Storage};
use crate::state::{
    ContentFacts, Decision, FileRecord, NextReview, Outcome, Proposal, State, journal,
};

/// Files larger than this are fingerprinted by content id instead of read.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 10;

/// The lifecycle status of a file at `now`.
pub fn status_of(record: &FileRecord, path: &str, locks: &[String], now: DateTime<Utc>) -> Status {
    let locked = locks.iter().any(|l| lifecycle::matches(l, path));
    let last_was_skip = record
        .decision
        .as_ref()
        .is_some_and(|d| matches!(d.outcome, Outcome::LocalSkip | Outcome::LlmSkip));
    let changed = record
        .changed_ts
        .or(record.first_ts)
        .unwrap_or(record.last_ts);
    lifecycle::status(changed, last_was_skip, record.rollback_streak, locked, now)
}

/// When a file would next be reviewed if it stays unchanged: never for a
/// locked file or one whose last decision is not a SKIP.
pub fn review_due(record: &FileRecord, path: &str, locks: &[String]) -> Option<DateTime<Utc>> {
    if locks.iter().any(|l| lifecycle::matches(l, path)) {
        return None;
    }
    let skip = record
        .decision
        .as_ref()
        .is_some_and(|d| matches!(d.outcome, Outcome::LocalSkip | Outcome::LlmSkip));
    if !skip {
        return None;
    }
    let changed = record
        .changed_ts
        .or(record.first_ts)
        .unwrap_or(record.last_ts);
    // Mature by then: a file unchanged this long is stable or certified.
    lifecycle::due_at(changed, record.review.as_ref(), Status::Stable)
}

/// Validated settings of one tick.
#[derive(Debug, Clone)]
pub struct TickConfig {
    pub state: PathBuf,
    /// The revision listed when the head is unknown (the branch, or `HEAD`).
    pub rev: String,
    /// Fresh evaluations per tick; 0 = unlimited.
    pub batch: usize,
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
}

impl TickConfig {
    fn locked(&self, path: &str) -> bool {
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

/// Tokens of the system prompt and framing, added to a file's own size.
const PROMPT_OVERHEAD_TOKENS: u64 = 400;

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
    fn new(path: &str, outcome: Outcome, reason: String, novelty: Novelty) -> FileReport {
        FileReport {
            path: path.to_string(),
            outcome,
            reason,
            novelty: Some(novelty),
            fingerprint: None,
            findings: None,
        }
    }

    fn with_fingerprint(mut self, fp: Option<String>) -> FileReport {
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
    pub files: Vec<FileReport>,
    pub counts: BTreeMap<&'static str, u64>,
    pub pending: u64,
    pub requests: u64,
    /// Requests per kind: head, list, read, compare, history.
    pub requests_by_kind: RequestCounts,
    /// Waits the source and the advisor asked for, in milliseconds.
    pub slept_ms: Vec<u64>,
    /// `on` or `off`.
    pub advisor: &'static str,
    /// HTTP attempts made to the model provider (every retry counts).
    pub llm_calls: u64,
    /// Every write of this tick: what was written where.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<WriteLog>,
    pub file_reads: u64,
    pub fresh_evaluations: u64,
    pub state_written: bool,
    pub dry_run: bool,
    pub notes: Vec<String>,
}

impl TickReport {
    fn new(exit_code: u8, verdict: ReportedVerdict, dry_run: bool) -> TickReport {
        TickReport {
            exit_code,
            verdict,
            head: None,
            files: Vec::new(),
            counts: BTreeMap::new(),
            pending: 0,
            requests: 0,
            requests_by_kind: RequestCounts::default(),
            slept_ms: Vec::new(),
            advisor: "off",
            llm_calls: 0,
            writes: Vec::new(),
            file_reads: 0,
            fresh_evaluations: 0,
            state_written: false,
            dry_run,
            notes: Vec::new(),
        }
    }
}

fn reported(v: &Verdict) -> ReportedVerdict {
    ReportedVerdict {
        wake: v.wake,
        reason: v.reason.as_str().to_string(),
        detail: v.detail.as_ref().and_then(|d| serde_json::to_value(d).ok()),
    }
}

/// Most state-derived triggers kept in the header.
const MAX_TRIGGERS: usize = 50;

/// Triggers the state itself provides, for the autonomy admission: an
/// unresolved rollback, a wrong stability prediction, an open proposal,
/// imports that do not resolve. Their identity is the condition, not the
/// time, so a persistent condition is one question, answered once.
fn derived_triggers(state: &State, cfg: &TickConfig) -> Vec<Trigger> {
    let mut out = Vec::new();
    for (path, r) in &state.files {
        if cfg.locked(path) {
            continue;
        }
        let ts = r.changed_ts.unwrap_or(r.last_ts);
        if r.rollback_streak > 0 {
            out.push(Trigger {
                path: path.clone(),
                kind: TriggerKind::UnresolvedRollback,
                detail: format!("streak={} blob={}", r.rollback_streak, r.blob),
                ts,
            });
        }
        if let Some(w) = observation::last_wrong(&state.observations, path) {
            out.push(Trigger {
                path: path.clone(),
                kind: TriggerKind::WrongPrediction,
                detail: w.resolved.to_rfc3339(),
                ts: w.resolved,
            });
        }
        if let Some(p) = state.llm.proposals.get(path) {
            out.push(Trigger {
                path: path.clone(),
                kind: TriggerKind::OpenProposal,
                detail: p.fingerprint.clone(),
                ts: p.ts,
            });
        }
        if r.fingerprint
            .as_deref()
            .is_some_and(|fp| fp.ends_with("|deps:unknown"))
        {
            out.push(Trigger {
                path: path.clone(),
                kind: TriggerKind::DependencyDrift,
                detail: format!("deps-unknown blob={}", r.blob),
                ts,
            });
        }
        if out.len() >= MAX_TRIGGERS {
            break;
        }
    }
    out
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

/// Run one tick against `source` with the advisor off.
pub fn run(cfg: &TickConfig, source: &mut dyn Source) -> Result<TickReport> {
    run_with(cfg, source, None)
}

/// Run one tick against `source`, asking `advisor` (when given) about the
/// files local policy cannot decide.
pub fn run_with(
    cfg: &TickConfig,
    source: &mut dyn Source,
    advisor: Option<&mut dyn Advisor>,
) -> Result<TickReport> {
    run_in(cfg, source, advisor, &mut FileStorage::new(&cfg.state))
}

/// Run one tick with its state in `storage` (files, or memory for `simulate`).
pub fn run_in(
    cfg: &TickConfig,
    source: &mut dyn Source,
    advisor: Option<&mut dyn Advisor>,
    storage: &mut dyn Storage,
) -> Result<TickReport> {
    run_full(cfg, source, advisor, storage, None, None)
}

/// Run one tick, and keep the dashboard in `publisher` when given.
pub fn run_full(
    cfg: &TickConfig,
    source: &mut dyn Source,
    mut advisor: Option<&mut dyn Advisor>,
    storage: &mut dyn Storage,
    publisher: Option<&mut dyn Publisher>,
    mut patcher: Option<&mut dyn Patcher>,
) -> Result<TickReport> {
    if !cfg.patches || cfg.dry_run {
        patcher = None;
    }
    if cfg.advisor.is_none() {
        advisor = None;
    }
    // A dry run writes nothing, so it needs no lock: saves are atomic renames
    // and a read always sees a whole document.
    if !cfg.dry_run {
        match storage.try_lock()? {
            Ok(()) => {}
            Err(path) => {
                let mut report = TickReport::new(
                    exit::BUSY,
                    ReportedVerdict {
                        wake: false,
                        reason: "busy".into(),
                        detail: Some(serde_json::json!({ "lock": path })),
                    },
                    false,
                );
                report
                    .notes
                    .push(format!("another tick holds `{}`", path.display()));
                return Ok(report);
            }
        }
    }

    // A poke is admitted at most once per window, before any request. A tick
    // refused as busy never got here, so it cannot consume the window.
    if cfg.trigger.is_triggered() {
        let last = storage.read_start();
        match admission::admit(cfg.trigger, last, cfg.min_interval, cfg.now) {
            admission::Admission::RateLimited { retry_after } => {
                let secs = retry_after.num_milliseconds().div_euclid(1000)
                    + i64::from(retry_after.num_milliseconds() % 1000 != 0);
                let mut report = TickReport::new(
                    exit::RATE_LIMITED,
                    ReportedVerdict {
                        wake: false,
                        reason: "rate_limited".into(),
                        detail: Some(serde_json::json!({
                            "trigger": cfg.trigger,
                            "last_start": last,
                            "retry_after_s": secs,
                        })),
                    },
                    cfg.dry_run,
                );
                report.notes.push(format!(
                    "a triggered tick within --min-interval of the last start; next in {secs} s"
                ));
                return Ok(report);
            }
            admission::Admission::Start if !cfg.dry_run => storage.write_start(cfg.now)?,
            admission::Admission::Start => {}
        }
    }

    let header = storage.load_header()?;
    let known_state = header.is_some();
    let header = header.unwrap_or_else(|| State::new().header());
    let evidence = cfg.evidence.clone();

    // The autonomy admission runs on every tick from the header alone.
    let admission = (cfg.autonomy.mode == autonomy::Mode::Controlled && cfg.advisor.is_some())
        .then(|| {
            let candidates: Vec<Candidate> = header
                .autonomy_triggers
                .iter()
                .chain(&cfg.signals)
                .map(|t| Candidate {
                    trigger: t.clone(),
                    locked: cfg.locked(&t.path),
                })
                .collect();
            let held = header.provider_held_until.is_some_and(|u| u > cfg.now);
            autonomy::admit(&header.autonomy, &cfg.autonomy, &candidates, held, cfg.now)
        });
    let autonomy_input = admission.as_ref().map(|a| match a {
        Admission::Eligible { path, trigger } => Ok((path.as_str(), trigger.kind.as_str())),
        Admission::Refused(r) => Err(r.as_str()),
    });

    let head = source.head();
    let head_err = head.as_ref().err().map(|e| e.to_string());
    let input = WakeInput {
        head: match &head {
            Ok(h) => Ok(h.as_str()),
            Err(_) => Err(head_err.as_deref().unwrap_or_default()),
        },
        evidence: &evidence,
        now: cfg.now,
        autonomy: autonomy_input,
    };
    let verdict = wake::evaluate(&header, &input);
    // Before anything is remembered, an unknown head is a setup problem, not
    // a hiccup: waking on it every tick would hide it behind exit codes.
    if let Err(SourceError::Config(e)) = &head {
        anyhow::bail!("{e} (nothing was saved)");
    }
    if let (Reason::FirstRun, Err(e)) = (verdict.reason, &head) {
        anyhow::bail!(
            "cannot find the latest commit of the watched path: {e}; check --repo, --branch and --path (nothing was saved)"
        );
    }
    let head = head.ok();

    if !verdict.wake {
        let mut report = TickReport::new(exit::NONE, reported(&verdict), cfg.dry_run);
        report.head = head.clone();
        if !cfg.dry_run {
            let short = head.as_deref().map(short_id).unwrap_or("-");
            storage.journal_append(header.journal, cfg.now, short)?;
        }
        report.requests = source.requests();
        report.requests_by_kind = source.request_counts();
        return Ok(report);
    }

    let mut state = if known_state {
        storage.load()?.unwrap_or_else(State::new)
    } else {
        State::new()
    };
    let contents = storage.journal_read()?;
    let unsaved = contents.unfolded(state.journal);

    if let Some(a) = &admission {
        autonomy::note(&mut state.autonomy, a);
    }
    // A reconsideration costs a token before it starts; it is refunded if
    // nothing was answered.
    let spent = match (&verdict.reason, &admission) {
        (Reason::AutonomyDue, Some(Admission::Eligible { path, trigger }))
            if state.files.contains_key(path) =>
        {
            Some(autonomy::spend(&mut state.autonomy, trigger, cfg.now))
        }
        _ => None,
    };
    let forced = match (&verdict.reason, &verdict.detail) {
        (Reason::OpportunityDue | Reason::AutonomyDue, Some(Detail::File { path, .. })) => {
            Some(path.clone())
        }
        _ => None,
    };
    let mut work = Work {
        cfg,
        reason: verdict.reason,
        forced,
        patcher,
        writes: Vec::new(),
        source,
        advisor,
        evidence: &evidence,
        fresh: 0,
        reads: 0,
        source_down: None,
        notes: Vec::new(),
    };
    let (settled, mut candidates) = work.plan(&mut state, &verdict, head.as_deref())?;
    // The file a wake is about goes first, whatever its place in the batch.
    if let Some(path) = &work.forced {
        candidates.retain(|p| p != path);
        candidates.insert(0, path.clone());
    }
    // The wake's own files come first, then what earlier wakes left over,
    // then files whose judgement did not happen (deferred, held, failed):
    // they are tried again on a wake, never on a tick of their own.
    let old_backlog = std::mem::take(&mut state.backlog);
    let mut seen: BTreeSet<String> = candidates.iter().cloned().collect();
    // Only wakes that look at the tree take the retry set along: a review,
    // a reconsideration or a grading wake is about its own files.
    let retry_wake = matches!(
        verdict.reason,
        Reason::FirstRun
            | Reason::ShaUnavailable
            | Reason::RepoChanged
            | Reason::EvidenceChanged
            | Reason::Backlog
    );
    let provider_open = retry_wake
        && work.advisor.is_some()
        && !state
            .llm
            .circuit
            .as_ref()
            .is_some_and(|c| protocol::is_open(c, cfg.now));
    let retry: Vec<String> = if provider_open {
        state
            .files
            .iter()
            .filter(|(_, r)| {
                r.decision.as_ref().is_some_and(|d| {
                    matches!(
                        d.outcome,
                        Outcome::Deferred | Outcome::Held | Outcome::Failed | Outcome::BadResponse
                    )
                })
            })
            .map(|(p, _)| p.clone())
            .collect()
    } else {
        Vec::new()
    };
    for p in old_backlog.into_iter().chain(retry) {
        if seen.insert(p.clone()) {
            candidates.push(p);
        }
    }
    let files = work.process(&mut state, &candidates)?;
    if let Some(spent) = &spent {
        let answered = files.iter().any(|f| {
            f.path == spent.path
                && !matches!(
                    f.outcome,
                    Outcome::Deferred
                        | Outcome::Held
                        | Outcome::Failed
                        | Outcome::BadResponse
                        | Outcome::Pending
                )
        });
        if !answered {
            autonomy::refund(&mut state.autonomy, spent);
        }
    }
    if let Some(e) = &work.source_down {
        work.notes.push(format!(
            "stopped reading: {e}; the files not read wait in the backlog"
        ));
    }
    work.retry_patches(&mut state);
    let patch_writes = std::mem::take(&mut work.writes);
    let llm_calls = work.advisor.as_ref().map_or(0, |a| a.calls());
    state.llm.attempts += llm_calls;
    let mut slept = work
        .advisor
        .as_ref()
        .map(|a| a.waits_ms())
        .unwrap_or_default();
    let (fresh, reads, mut notes) = (work.fresh, work.reads, work.notes);

    for gone in novelty::evict(state.files.iter(), state.files.len(), cfg.max_files) {
        state.files.remove(&gone);
    }
    if state.files.len() >= cfg.max_files && cfg.max_files > 0 {
        notes.push(format!(
            "the file limit of {} was reached; raise --max-files above the repository's size",
            cfg.max_files
        ));
    }
    state.backlog = files
        .iter()
        .filter(|f| f.outcome == Outcome::Pending && state.files.contains_key(&f.path))
        .map(|f| f.path.clone())
        .collect();

    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    for f in &files {
        *counts.entry(f.outcome.as_str()).or_default() += 1;
        if f.outcome != Outcome::Pending {
            *state
                .outcomes
                .entry(f.outcome.as_str().to_string())
                .or_default() += 1;
        }
    }
    state.novelty.fresh_evaluations += fresh;
    state.novelty.file_reads += reads;
    state.novelty.reuses += counts.get("reused").copied().unwrap_or(0);
    state.novelty.estimated_tokens_saved += files
        .iter()
        .filter(|f| f.outcome == Outcome::Reused)
        .filter_map(|f| state.files.get(&f.path))
        .map(|r| novelty::estimate_tokens(r.content.as_ref().map_or(0, |c| c.chars)))
        .sum::<u64>();

    state.next_observation_due = observation::next_due(&state.observations);
    state.provider_held_until = state
        .llm
        .circuit
        .as_ref()
        .filter(|c| protocol::is_open(c, cfg.now))
        .map(|c| c.until);
    state.autonomy_triggers = derived_triggers(&state, cfg);
    state.next_review = state
        .files
        .iter()
        .filter_map(|(p, r)| review_due(r, p, &cfg.locks).map(|at| (at, p)))
        .min()
        .map(|(at, p)| NextReview {
            at,
            path: p.clone(),
        });
    wake::remember(
        &mut state.wake,
        &verdict,
        unsaved,
        head.as_deref(),
        &evidence,
        settled,
        cfg.now,
    );
    state.journal = journal::fold(state.journal, contents);

    let mut report = TickReport::new(
        exit::for_reason(verdict.reason),
        reported(&verdict),
        cfg.dry_run,
    );
    report.writes = patch_writes;
    if !cfg.dry_run {
        // The dashboard goes first, so the hash saved with the state is the
        // hash of what was really published; a failure keeps the old hash
        // and a later wake tries again.
        if let Some(publisher) = publisher {
            let page = dashboard::render(&state, cfg.web_url.as_deref(), cfg.now);
            let h = dashboard::hash(dashboard::without_health(&page));
            if state.llm.dashboard_hash.as_deref() != Some(h.as_str()) {
                match publisher.publish(&page) {
                    Ok(detail) => {
                        state.llm.dashboard_hash = Some(h);
                        report.writes.push(WriteLog {
                            kind: "dashboard",
                            target: publisher.target(),
                            ok: true,
                            detail,
                        });
                    }
                    Err(detail) => {
                        notes.push(detail.clone());
                        report.writes.push(WriteLog {
                            kind: "dashboard",
                            target: publisher.target(),
                            ok: false,
                            detail,
                        });
                    }
                }
            }
        }
        let bytes = storage.save(&state)?;
        report.state_written = true;
        report.writes.push(WriteLog {
            kind: "state",
            target: cfg.state.display().to_string(),
            ok: true,
            detail: format!("{bytes} bytes"),
        });
        storage.journal_clear()?;
        if let Some(path) = &cfg.codequality {
            let bytes = crate::report::codequality::render(&state.llm.proposals)?;
            storage.write_report(path, &bytes)?;
            report.writes.push(WriteLog {
                kind: "codequality",
                target: path.display().to_string(),
                ok: true,
                detail: format!("{} bytes", bytes.len()),
            });
        }
    }
    report.head = head;
    report.pending = state.backlog.len() as u64;
    report.files = files;
    report.counts = counts;
    report.requests = source.requests();
    report.requests_by_kind = source.request_counts();
    let mut waits = source.waits_ms();
    waits.append(&mut slept);
    report.slept_ms = waits;
    report.llm_calls = llm_calls;
    report.advisor = cfg.advisor.as_ref().map(|_| "on").unwrap_or("off");
    if cfg.advisor.is_none() && report.counts.contains_key("needs_review") {
        notes.push(
            "advisor off: set OPENAI_API_KEY to have a model judge the needs_review files".into(),
        );
    }
    report.file_reads = reads;
    report.fresh_evaluations = fresh;
    report.notes = notes;
    Ok(report)
}

/// The first seven characters of a commit id, for humans.
pub fn short_id(id: &str) -> &str {
    id.get(..7).unwrap_or(id)
}

struct Work<'a, 'b, 'c> {
    cfg: &'a TickConfig,
    /// Why this tick woke.
    reason: Reason,
    /// The file a review or a reconsideration is about: evaluated afresh.
    forced: Option<String>,
    source: &'a mut dyn Source,
    advisor: Option<&'a mut (dyn Advisor + 'b)>,
    patcher: Option<&'a mut (dyn Patcher + 'c)>,
    /// Writes made while judging (patches), for the report.
    writes: Vec<WriteLog>,
    evidence: &'a str,
    fresh: u64,
    reads: u64,
    /// Set when the source failed a read: no further reads this tick.
    source_down: Option<String>,
    notes: Vec<String>,
}

/// A configuration error ends the tick; anything else is noted and the tick goes on.
fn fatal(e: SourceError) -> Result<SourceError> {
    match e {
        SourceError::Config(msg) => Err(anyhow::anyhow!("{msg} (nothing was saved)")),
        other => Ok(other),
    }
}

impl Work<'_, '_, '_> {
    /// Bring the remembered tree up to the head and return the files the
    /// wake is about. `settled` is false when the tree could not be learned.
    fn plan(
        &mut self,
        state: &mut State,
        verdict: &Verdict,
        head: Option<&str>,
    ) -> Result<(bool, Vec<String>)> {
        Ok(match verdict.reason {
            Reason::FirstRun | Reason::ShaUnavailable => {
                let at = head.unwrap_or(&self.cfg.rev).to_string();
                match self.source.list(&at) {
                    Ok(entries) => {
                        self.sync(state, entries);
                        (true, state.files.keys().cloned().collect())
                    }
                    Err(e) => {
                        let e = fatal(e)?;
                        self.notes.push(format!("listing failed: {e}"));
                        (false, Vec::new())
                    }
                }
            }
            Reason::RepoChanged => {
                let (from, to) = match &verdict.detail {
                    Some(Detail::Change { from, to }) => (from.clone(), to.clone()),
                    _ => return Ok((false, Vec::new())),
                };
                let changed = match self.source.changes(&from, &to) {
                    Ok(changes) => Some(apply_changes(state, changes, self.cfg.now)),
                    Err(e) => {
                        let e = fatal(e)?;
                        self.notes
                            .push(format!("compare failed ({e}); fell back to the listing"));
                        match self.source.list(&to) {
                            Ok(entries) => Some(self.sync(state, entries)),
                            Err(e) => {
                                let e = fatal(e)?;
                                self.notes.push(format!("listing failed: {e}"));
                                None
                            }
                        }
                    }
                };
                match changed {
                    Some(mut changed) => {
                        self.rollbacks(state, &from, &to, &mut changed)?;
                        (true, with_dependents(state, changed))
                    }
                    None => (false, Vec::new()),
                }
            }
            Reason::EvidenceChanged => (true, state.files.keys().cloned().collect()),
            Reason::ObservationDue => {
                // Grading needs no file: the streak and the lock are in the state.
                let (before_ok, before_wrong) = (
                    state.observations.totals.resolved_correct,
                    state.observations.totals.resolved_wrong,
                );
                for path in observation::due(&state.observations, self.cfg.now) {
                    self.grade(state, &path);
                }
                let t = &state.observations.totals;
                self.notes.push(format!(
                    "graded {} prediction(s): {} correct, {} wrong",
                    t.resolved_correct - before_ok + t.resolved_wrong - before_wrong,
                    t.resolved_correct - before_ok,
                    t.resolved_wrong - before_wrong
                ));
                (true, Vec::new())
            }
            _ => (true, Vec::new()),
        })
    }

    /// Revert commits raise the rollback streak of the files they touch,
    /// even when the revert leaves the bytes as they were (the streak is part
    /// of the fingerprint, so those files are looked at again); a file changed
    /// in the range by anything else starts over at zero.
    fn rollbacks(
        &mut self,
        state: &mut State,
        from: &str,
        to: &str,
        changed: &mut Changed,
    ) -> Result<()> {
        let reverts = match self.source.reverts(from, to) {
            Ok(r) => r,
            Err(e) => {
                let e = fatal(e)?;
                self.notes.push(format!("rollback lookup failed: {e}"));
                return Ok(());
            }
        };
        let mut raised: BTreeMap<&str, u32> = BTreeMap::new();
        for paths in &reverts {
            for p in paths {
                *raised.entry(p.as_str()).or_default() += 1;
            }
        }
        for p in changed.added.iter().chain(&changed.modified) {
            if let Some(r) = state.files.get_mut(p)
                && !raised.contains_key(p.as_str())
            {
                r.rollback_streak = 0;
            }
        }
        for (p, n) in raised {
            if let Some(r) = state.files.get_mut(p) {
                r.rollback_streak = r.rollback_streak.saturating_add(n);
                if !changed
                    .added
                    .iter()
                    .chain(&changed.modified)
                    .any(|c| c == p)
                {
                    changed.modified.push(p.to_string());
                }
            }
        }
        Ok(())
    }

    /// Replace the remembered tree with a listing; returns the changed paths.
    fn sync(&mut self, state: &mut State, entries: Vec<Entry>) -> Changed {
        let mut changed = Changed::default();
        let listed: BTreeSet<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        let gone: Vec<String> = state
            .files
            .keys()
            .filter(|p| !listed.contains(p.as_str()))
            .cloned()
            .collect();
        for p in gone {
            state.files.remove(&p);
            changed.deleted.push(p);
        }
        for e in &entries {
            match state.files.get_mut(&e.path) {
                Some(r) if r.blob == e.blob => {}
                Some(r) => {
                    r.blob = e.blob.clone();
                    r.content = None;
                    r.changed_ts = Some(self.cfg.now);
                    r.review = None;
                    mark_stale(&mut state.llm.proposals, &e.path);
                    changed.modified.push(e.path.clone());
                }
                None => {
                    state
                        .files
                        .insert(e.path.clone(), new_record(&e.blob, self.cfg.now));
                    changed.added.push(e.path.clone());
                }
            }
        }
        changed
    }

    fn process(&mut self, state: &mut State, candidates: &[String]) -> Result<Vec<FileReport>> {
        let mut out = Vec::with_capacity(candidates.len());
        for path in candidates {
            if state.files.contains_key(path) {
                out.push(self.process_one(state, path)?);
            }
        }
        Ok(out)
    }

    /// Commit a proposal's pending content to the sandbox branch. A failure
    /// keeps it pending for a later wake: one attempt per wake, no loop.
    fn commit_patch(&mut self, path: &str, proposal: &mut Proposal) {
        let (Some(patcher), Some(content)) =
            (self.patcher.as_mut(), proposal.patch_pending.clone())
        else {
            return;
        };
        let message = format!("sentinel: proposed change to {path}\n\n{}", proposal.reason);
        match patcher.commit(path, &content, &message) {
            Ok(commit) => {
                self.writes.push(WriteLog {
                    kind: "patch",
                    target: format!("{path} on {}", patcher.target()),
                    ok: true,
                    detail: format!("commit {commit}"),
                });
                proposal.patch_commit = Some(commit);
                proposal.patch_pending = None;
            }
            Err(why) => self.writes.push(WriteLog {
                kind: "patch",
                target: format!("{path} on {}", patcher.target()),
                ok: false,
                detail: why,
            }),
        }
    }

    /// Try again the patches whose commit failed on an earlier wake.
    fn retry_patches(&mut self, state: &mut State) {
        let pending: Vec<String> = state
            .llm
            .proposals
            .iter()
            .filter(|(_, p)| p.patch_pending.is_some() && p.patch_commit.is_none() && !p.stale)
            .map(|(path, _)| path.clone())
            .filter(|path| {
                !self
                    .writes
                    .iter()
                    .any(|w| w.target.starts_with(path.as_str()))
            })
            .collect();
        for path in pending {
            if let Some(mut p) = state.llm.proposals.remove(&path) {
                self.commit_patch(&path, &mut p);
                state.llm.proposals.insert(path, p);
            }
        }
    }

    /// Grade the file's open watch if its window elapsed or an incident
    /// happened; a file that left the tree closes its watch ungraded.
    fn grade(&mut self, state: &mut State, path: &str) {
        match state.files.get(path) {
            Some(r) => {
                let streak = r.rollback_streak;
                observation::resolve_if_due(
                    &mut state.observations,
                    path,
                    streak,
                    self.cfg.locked(path),
                    self.cfg.now,
                    self.cfg.resolved_limit,
                );
            }
            None => {
                state.observations.open.remove(path);
            }
        }
    }

    /// Label a SKIP (observation mode). It never changes the decision.
    #[allow(clippy::too_many_arguments)]
    fn observe(
        &self,
        state: &mut State,
        path: &str,
        reason: &str,
        status: Status,
        role: policy::Role,
        risk: policy::Risk,
    ) {
        let streak = state.files.get(path).map_or(0, |r| r.rollback_streak);
        observation::observe(
            &mut state.observations,
            path,
            &ObserveInput {
                reason,
                status: status.as_str(),
                role: role.as_str(),
                risk: risk.as_str(),
                confidence: policy::confidence(role, streak, 0),
                known_skip: role != policy::Role::Unknown,
                rollback_streak: streak,
            },
            self.cfg.now,
            self.cfg.watch_limit,
        );
    }

    fn batch_full(&self) -> bool {
        self.cfg.batch > 0 && self.fresh >= self.cfg.batch as u64
    }

    fn process_one(&mut self, state: &mut State, path: &str) -> Result<FileReport> {
        let now = self.cfg.now;
        let (role, risk) = policy::classify(path);
        self.grade(state, path);
        let record = &state.files[path];
        let why_pending = if self.source_down.is_some() {
            "the source is unavailable"
        } else {
            "the batch limit is reached"
        };
        let pending = |novelty: Novelty, fingerprint: Option<String>| {
            FileReport::new(
                path,
                Outcome::Pending,
                format!("{}; left for a later tick: {why_pending}", novelty.as_str()),
                novelty,
            )
            .with_fingerprint(fingerprint)
        };

        // Facts about the current bytes: remembered per content id, so an
        // unchanged file is never read again to learn them.
        let mut bytes: Option<Vec<u8>> = None;
        let facts = match record.content.as_ref() {
            Some(f) => f.clone(),
            None => {
                let novelty = if record.fingerprint.is_some() {
                    Novelty::Changed
                } else {
                    Novelty::FirstSeen
                };
                if self.batch_full() || self.source_down.is_some() {
                    return Ok(pending(novelty, None));
                }
                let blob = record.blob.clone();
                match self.read(path, &blob)? {
                    Ok((f, b)) => {
                        bytes = b;
                        f
                    }
                    Err(e) => {
                        return Ok(FileReport::new(
                            path,
                            Outcome::Pending,
                            format!("{}; could not read the file: {e}", novelty.as_str()),
                            novelty,
                        ));
                    }
                }
            }
        };

        let status = status_of(&state.files[path], path, &self.cfg.locks, now);
        let (fp, resolved) = fingerprint_of(&state.files, path, &facts, self.evidence, status);
        let deps_known = resolved.unresolved.is_empty();
        let verdict = novelty::evaluate(Some(&state.files[path]), &fp, deps_known);
        if let Some(r) = state.files.get_mut(path) {
            r.content = Some(facts.clone());
        }
        // A scheduled review or a reconsideration is an event in its own
        // right: a remembered SKIP must not swallow it.
        let forced = self.forced.as_deref() == Some(path);

        if !verdict.is_novel() && !forced {
            let record = state.files.get_mut(path).expect("candidate is in the tree");
            novelty::reuse(record, novelty::estimate_tokens(facts.chars), now);
            let prev = record
                .decision
                .as_ref()
                .expect("unchanged implies a decision");
            let reason = format!("unchanged since {}: {}", prev.outcome.as_str(), prev.reason);
            let (prev_outcome, prev_reason) = (prev.outcome, prev.reason.clone());
            if matches!(prev_outcome, Outcome::LocalSkip | Outcome::LlmSkip) {
                self.observe(state, path, &prev_reason, status, role, risk);
            }
            return Ok(
                FileReport::new(path, Outcome::Reused, reason, verdict).with_fingerprint(Some(fp))
            );
        }
        if self.batch_full() {
            return Ok(pending(verdict, Some(fp)));
        }
        self.fresh += 1;
        let local = if status == Status::Locked {
            policy::LocalDecision {
                outcome: Outcome::LocalSkip,
                reason: "locked by configuration: never judged".into(),
            }
        } else {
            policy::decide(role, risk)
        };
        let previous = state.files[path]
            .decision
            .as_ref()
            .map(|d| (d.outcome, d.reason.clone()));
        let (outcome, mut reason, findings) =
            if local.outcome == Outcome::NeedsReview && self.cfg.advisor.is_some() {
                let blob = state.files[path].blob.clone();
                let ask = Ask {
                    path,
                    role: role.as_str(),
                    risk: risk.as_str(),
                    blob: &blob,
                    facts: &facts,
                    fingerprint: &fp,
                };
                self.consult(state, &ask, bytes)?
            } else {
                (local.outcome, local.reason, None)
            };
        if !deps_known {
            reason.push_str(&format!(
                "; unresolved imports: {}",
                resolved.unresolved.join(", ")
            ));
        }
        let record = state.files.get_mut(path).expect("candidate is in the tree");
        record.deps = resolved.paths;
        if forced && self.reason == Reason::OpportunityDue {
            let identical = previous.as_ref() == Some(&(outcome, reason.clone()));
            record.review = Some(lifecycle::after_review(
                record.review.as_ref(),
                identical,
                now,
            ));
        }
        novelty::remember(
            record,
            &fp,
            Decision {
                outcome,
                reason: reason.clone(),
                ts: now,
            },
            now,
        );
        // A proposal stays open until the file is judged again; a failed or
        // held look is no judgement.
        if matches!(
            outcome,
            Outcome::LocalSkip | Outcome::LlmSkip | Outcome::NeedsReview
        ) {
            state.llm.proposals.remove(path);
        }
        if matches!(
            outcome,
            Outcome::LocalSkip | Outcome::LlmSkip | Outcome::Deferred
        ) {
            self.observe(state, path, &reason, status, role, risk);
        }
        let mut report = FileReport::new(path, outcome, reason, verdict).with_fingerprint(Some(fp));
        report.findings = findings;
        Ok(report)
    }

    /// One read through the source. A configuration error ends the tick; a
    /// source that cannot answer now is remembered so no further reads are
    /// tried this tick (the inner `Err`).
    #[allow(clippy::type_complexity)]
    fn read(
        &mut self,
        path: &str,
        blob: &str,
    ) -> Result<std::result::Result<(ContentFacts, Option<Vec<u8>>), SourceError>> {
        match read_facts(&mut *self.source, path, blob, self.cfg.max_file_bytes) {
            Ok((f, b)) => {
                self.reads += u64::from(b.is_some());
                Ok(Ok((f, b)))
            }
            Err(e) => {
                let e = fatal(e)?;
                self.source_down = Some(e.to_string());
                Ok(Err(e))
            }
        }
    }

    /// Ask the advisor about a file local policy could not decide: size
    /// limit, circuit, budget, then the call. Only an answer is a decision.
    fn consult(
        &mut self,
        state: &mut State,
        ask: &Ask,
        bytes: Option<Vec<u8>>,
    ) -> Result<(Outcome, String, Option<Vec<Finding>>)> {
        let now = self.cfg.now;
        let mut settings = self
            .cfg
            .advisor
            .clone()
            .expect("consulted only with an advisor");
        // A model without a price counts the real cost per call measured by
        // `sentinel costs --calibrate`, once there is one.
        if settings.price.is_none()
            && let Some(real) = self
                .advisor
                .as_ref()
                .and_then(|a| state.llm.calibrated.get(a.model()))
        {
            settings.per_call = *real;
        }
        if ask.facts.chars > self.cfg.max_file_bytes {
            return Ok((
                Outcome::TooLarge,
                format!(
                    "{} bytes is over --max-file-bytes {}; not sent to the model",
                    ask.facts.chars, self.cfg.max_file_bytes
                ),
                None,
            ));
        }
        if let Some(c) = state
            .llm
            .circuit
            .as_ref()
            .filter(|c| protocol::is_open(c, now))
        {
            return Ok((
                Outcome::Held,
                format!(
                    "provider held until {} ({}): {}",
                    c.until.to_rfc3339(),
                    c.class.as_str(),
                    c.advice
                ),
                None,
            ));
        }
        let reserve = budget::reserve(
            settings.price.as_ref(),
            ask.facts.chars,
            PROMPT_OVERHEAD_TOKENS,
            settings.max_tokens,
            settings.per_call,
        );
        if let Err(why) = budget::admit(&mut state.llm.budget, settings.daily_budget, reserve, now)
        {
            return Ok((
                Outcome::Deferred,
                format!(
                    "{why}: ${:.4} spent today, this call could cost ${reserve:.4} of the ${:.2} limit",
                    budget::spent_today(&state.llm.budget),
                    settings.daily_budget
                ),
                None,
            ));
        }
        let bytes = match bytes {
            Some(b) => b,
            None => match self.read(ask.path, ask.blob)? {
                Ok((_, Some(b))) => b,
                Ok((_, None)) => {
                    return Ok((
                        Outcome::TooLarge,
                        "over the size limit; not sent to the model".into(),
                        None,
                    ));
                }
                Err(e) => {
                    return Ok((
                        Outcome::Failed,
                        format!("could not read the file for the advisor: {e}"),
                        None,
                    ));
                }
            },
        };
        let Some(advisor) = self.advisor.as_mut() else {
            // A dry run calls no model; it says what it would have done.
            return Ok((
                Outcome::Pending,
                "dry run: would ask the model".into(),
                None,
            ));
        };
        let content = String::from_utf8_lossy(&bytes);
        let model = advisor.model().to_string();
        let call = advisor.ask(
            &AdviceRequest {
                path: ask.path,
                role: ask.role,
                risk: ask.risk,
                content: &content,
            },
            now,
        );
        let answered = matches!(call.outcome, CallOutcome::Answered(_));
        match (call.usage, settings.price) {
            (Some(usage), Some(price)) => {
                budget::settle(
                    &mut state.llm.budget,
                    prices::cost(&price, &usage),
                    false,
                    now,
                );
            }
            // Billed, but the real cost is unknown: count the estimate and say so.
            (Some(_), None) => budget::settle(&mut state.llm.budget, settings.per_call, true, now),
            (None, _) if answered => budget::settle(&mut state.llm.budget, reserve, true, now),
            (None, _) => {}
        }
        crate::gate::costs::record(
            &mut state.llm.days,
            &state.llm.budget,
            &model,
            u64::from(call.attempts),
        );
        Ok(match call.outcome {
            CallOutcome::Answered(answer) => {
                state.llm.circuit = None;
                match answer.action {
                    Action::Skip => (Outcome::LlmSkip, answer.reason, None),
                    Action::Evolve => {
                        let mut proposal = Proposal {
                            fingerprint: ask.fingerprint.to_string(),
                            reason: answer.reason.clone(),
                            findings: answer.findings.clone(),
                            ts: now,
                            stale: false,
                            patch_commit: None,
                            patch_pending: None,
                        };
                        if let (Some(content), true) = (&answer.content, self.patcher.is_some()) {
                            match patch::validate(&bytes, content, self.cfg.max_file_bytes) {
                                Ok(()) => {
                                    proposal.patch_pending = Some(content.clone());
                                    self.commit_patch(ask.path, &mut proposal);
                                }
                                Err(why) => self.writes.push(WriteLog {
                                    kind: "patch",
                                    target: ask.path.to_string(),
                                    ok: false,
                                    detail: format!("not committed: {why}"),
                                }),
                            }
                        }
                        state.llm.proposals.insert(ask.path.to_string(), proposal);
                        (Outcome::Evolve, answer.reason, Some(answer.findings))
                    }
                }
            }
            CallOutcome::Failed {
                class,
                reason,
                hold_until,
            } => {
                *state
                    .llm
                    .failures
                    .entry(class.as_str().to_string())
                    .or_default() += 1;
                if let Some(until) = hold_until {
                    let mut circuit = Circuit::new(class, reason.clone(), until);
                    circuit.opened = Some(now);
                    state.llm.circuit = Some(circuit);
                }
                let outcome = if class == protocol::Class::BadResponse {
                    Outcome::BadResponse
                } else {
                    Outcome::Failed
                };
                let held = hold_until
                    .map(|u| format!("; provider held until {}", u.to_rfc3339()))
                    .unwrap_or_default();
                (
                    outcome,
                    format!(
                        "{} after {} attempt{}: {reason}{held}",
                        class.as_str(),
                        call.attempts,
                        if call.attempts == 1 { "" } else { "s" }
                    ),
                    None,
                )
            }
        })
    }
}

/// What the advisor is asked about, gathered by `process_one`.
struct Ask<'a> {
    path: &'a str,
    role: &'a str,
    risk: &'a str,
    blob: &'a str,
    facts: &'a ContentFacts,
    fingerprint: &'a str,
}

/// Learn the facts of one content id: one read, unless it is over the limit,
/// in which case the content id itself stands for the bytes. The flag says
/// whether the bytes were read, and hands them over.
fn read_facts(
    source: &mut dyn Source,
    path: &str,
    blob: &str,
    limit: u64,
) -> Result<(ContentFacts, Option<Vec<u8>>), SourceError> {
    match source.read(blob, limit) {
        Ok(bytes) => Ok((
            ContentFacts {
                hash: content_hash(&bytes),
                chars: bytes.len() as u64,
                imports: deps::extract(path, &bytes),
            },
            Some(bytes),
        )),
        Err(SourceError::TooLarge { size, .. }) => Ok((
            ContentFacts {
                hash: blob.get(..16).unwrap_or(blob).to_string(),
                chars: size,
                imports: Vec::new(),
            },
            None,
        )),
        Err(e) => Err(e),
    }
}

/// The current fingerprint of `path` given the facts of its current bytes and
/// the remembered tree (for the content ids of its dependencies).
pub fn fingerprint_of(
    files: &BTreeMap<String, FileRecord>,
    path: &str,
    facts: &ContentFacts,
    evidence: &str,
    status: Status,
) -> (String, deps::Resolved) {
    let (role, risk) = policy::classify(path);
    let record_streak = files.get(path).map_or(0, |r| r.rollback_streak);
    let resolved = deps::resolve(path, &facts.imports, &|p| files.contains_key(p));
    let deps_known = resolved.unresolved.is_empty();
    let dep_ids: Vec<(String, String)> = resolved
        .paths
        .iter()
        .map(|p| (p.clone(), files[p].blob.clone()))
        .collect();
    let fp = novelty::fingerprint(&Parts {
        content: &facts.hash,
        risk: risk.as_str(),
        role: role.as_str(),
        confidence: policy::confidence(role, record_streak, 0),
        status: status.as_str(),
        rollback_streak: record_streak,
        penalty: 0,
        evidence,
        deps: deps_known.then_some(dep_ids.as_slice()),
    });
    (fp, resolved)
}

/// The settings a fingerprint depends on, for `explain`.
#[derive(Debug, Clone)]
pub struct Judging {
    pub max_file_bytes: u64,
    pub evidence: String,
    pub locks: Vec<String>,
    pub now: DateTime<Utc>,
}

/// What `explain` compares the remembered fingerprint with.
#[derive(Debug, Clone)]
pub struct Current {
    pub blob: Option<String>,
    pub fingerprint: Option<String>,
    pub unresolved: Vec<String>,
    pub error: Option<String>,
}

/// The file's fingerprint at the head of the watched branch: the tree is
/// listed (one request), and the file read only when its bytes are not known.
pub fn current_fingerprint(
    state: &State,
    source: &mut dyn Source,
    rev: &str,
    path: &str,
    judging: &Judging,
) -> Current {
    let Judging {
        max_file_bytes,
        evidence,
        locks,
        now,
    } = judging;
    let (max_file_bytes, now) = (*max_file_bytes, *now);
    let mut current = Current {
        blob: None,
        fingerprint: None,
        unresolved: Vec::new(),
        error: None,
    };
    let entries = match source
        .head()
        .and_then(|h| source.list(&h))
        .or_else(|_| source.list(rev))
    {
        Ok(e) => e,
        Err(e) => {
            current.error = Some(format!("listing failed: {e}"));
            return current;
        }
    };
    let mut files: BTreeMap<String, FileRecord> = BTreeMap::new();
    for e in entries {
        let mut r = state.files.get(&e.path).cloned().unwrap_or_default();
        if r.blob != e.blob {
            r.blob = e.blob;
            r.content = None;
        }
        files.insert(e.path, r);
    }
    let Some(record) = files.get(path) else {
        current.error = Some("the file is not in the watched tree at the head".into());
        return current;
    };
    current.blob = Some(record.blob.clone());
    let facts = match record.content.as_ref() {
        Some(f) => f.clone(),
        None => match read_facts(source, path, &record.blob, max_file_bytes) {
            Ok((f, _)) => f,
            Err(e) => {
                current.error = Some(format!("could not read the file: {e}"));
                return current;
            }
        },
    };
    let status = status_of(&files[path], path, locks, now);
    let (fp, resolved) = fingerprint_of(&files, path, &facts, evidence, status);
    current.fingerprint = Some(fp);
    current.unresolved = resolved.unresolved;
    current
}

/// The first 16 hex digits of the sha256 of the bytes.
pub fn content_hash(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes)[..8])
}

fn new_record(blob: &str, now: DateTime<Utc>) -> FileRecord {
    FileRecord {
        blob: blob.to_string(),
        changed_ts: Some(now),
        last_ts: now,
        ..FileRecord::default()
    }
}

/// The file changed on the watched branch: its proposal no longer applies
/// as it stands, and a content not yet committed is dropped.
fn mark_stale(proposals: &mut BTreeMap<String, Proposal>, path: &str) {
    if let Some(p) = proposals.get_mut(path) {
        p.stale = true;
        p.patch_pending = None;
    }
}

/// Paths that changed between the remembered tree and the new one.
#[derive(Debug, Default)]
struct Changed {
    added: Vec<String>,
    modified: Vec<String>,
    deleted: Vec<String>,
}

fn apply_changes(state: &mut State, changes: Vec<Change>, now: DateTime<Utc>) -> Changed {
    let mut changed = Changed::default();
    for c in changes {
        match c {
            Change::Upsert { path, blob } => match state.files.get_mut(&path) {
                Some(r) => {
                    // A failed head lookup may already have brought this
                    // file up to date from the listing: keep what is known.
                    if r.blob != blob {
                        r.blob = blob;
                        r.content = None;
                        r.changed_ts = Some(now);
                        r.review = None;
                        mark_stale(&mut state.llm.proposals, &path);
                    }
                    changed.modified.push(path);
                }
                None => {
                    state.files.insert(path.clone(), new_record(&blob, now));
                    changed.added.push(path);
                }
            },
            Change::Delete { path } => {
                if state.files.remove(&path).is_some() {
                    changed.deleted.push(path);
                }
            }
        }
    }
    state.backlog.retain(|p| state.files.contains_key(p));
    changed
}

/// The changed files that still exist, then the files that depend on any
/// changed one. When paths appeared or disappeared, files whose imports could
/// not all be resolved are looked at again too: the new tree may resolve them.
fn with_dependents(state: &State, changed: Changed) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for p in changed.added.iter().chain(&changed.modified) {
        if seen.insert(p.clone()) {
            out.push(p.clone());
        }
    }
    let touched: BTreeSet<&str> = changed
        .added
        .iter()
        .chain(&changed.modified)
        .chain(&changed.deleted)
        .map(String::as_str)
        .collect();
    let mut reverse: HashMap<&str, Vec<&str>> = HashMap::new();
    for (path, r) in &state.files {
        for d in &r.deps {
            reverse.entry(d.as_str()).or_default().push(path.as_str());
        }
    }
    let mut dependents: BTreeSet<&str> = touched
        .iter()
        .filter_map(|t| reverse.get(t))
        .flatten()
        .copied()
        .collect();
    if !changed.added.is_empty() || !changed.deleted.is_empty() {
        dependents.extend(
            state
                .files
                .iter()
                .filter(|(_, r)| {
                    r.fingerprint
                        .as_deref()
                        .is_some_and(|fp| fp.ends_with("|deps:unknown"))
                })
                .map(|(p, _)| p.as_str()),
        );
    }
    for d in dependents {
        if seen.insert(d.to_string()) {
            out.push(d.to_string());
        }
    }
    out
}

#[cfg(test)]
#[path = "tick_tests.rs"]
mod tests;

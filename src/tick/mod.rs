//! One tick, cheapest stage first: the only place that orders effects.
//!
//! `run` reads top to bottom as the stages of the design: lock, admit, look
//! (one head lookup and the verdict), the no-op, then load, plan, judge
//! (consulting the advisor only where local policy cannot decide), save and
//! report. Every early exit is visible at its stage.

mod clock;
mod config;
mod consult;
mod early;
mod facts;
mod identity;
mod judge;
mod ledger;
mod moved;
mod outage;
mod plan;
mod report;
mod sandbox;
mod save;
mod triggers;
mod waiting;

use anyhow::Result;

pub use config::{
    AdvisorSettings, FleetBook, FleetBudget, FleetShare, LegacyEvidence, TickConfig,
    current_evidence, legacy_evidence,
};
pub use facts::{
    Current, DEFAULT_MAX_FILE_BYTES, Judging, SUMMARY_RULES, content_hash, current_fingerprint,
    fingerprint_of, review_due, status_of,
};
pub use report::{FileReport, ReportedVerdict, TickReport, short_id};
pub use sandbox::{SandboxCommit, SandboxReport};

use crate::exit;
use crate::gate::autonomy::{self, Admission};
use crate::gate::wake::{Detail, Reason};
use crate::llm::client::Advisor;
use crate::patch::Patcher;
use crate::publish::{Publisher, WriteLog};
use crate::source::{Source, SourceError};
use crate::state::storage::Storage;
use crate::state::{Outcome, State};
use early::Look;

/// Everything a tick acts on, passed in as one value so that the binary,
/// `simulate` and the tests choose the real thing or a fake.
pub struct Effects<'a> {
    pub source: &'a mut dyn Source,
    /// `None`: no advisor (judgement is handed over as `needs_review`).
    pub advisor: Option<&'a mut dyn Advisor>,
    pub storage: &'a mut dyn Storage,
    /// Where the dashboard of open proposals goes, if anywhere.
    pub publisher: Option<&'a mut dyn Publisher>,
    /// Where proposed contents are committed, if anywhere.
    pub patcher: Option<&'a mut dyn Patcher>,
    /// The process ends with this tick: its state is left to the exit
    /// rather than freed record by record (a first run's 100,000 of them
    /// took 3% of its CPU to free).
    pub last: bool,
}

impl<'a> Effects<'a> {
    /// A source and a storage, with no advisor, publisher or patcher.
    pub fn new(source: &'a mut dyn Source, storage: &'a mut dyn Storage) -> Effects<'a> {
        Effects {
            source,
            advisor: None,
            storage,
            publisher: None,
            patcher: None,
            last: false,
        }
    }

    /// The same effects, with `advisor` consulted where policy cannot decide.
    pub fn with_advisor(mut self, advisor: Option<&'a mut dyn Advisor>) -> Effects<'a> {
        self.advisor = advisor;
        self
    }
}

/// Run one tick.
pub fn run(cfg: &TickConfig, fx: &mut Effects) -> Result<TickReport> {
    if let Some(busy) = early::lock(cfg, fx.storage)? {
        return Ok(busy);
    }
    if let Some(advisor) = fx.advisor.as_mut() {
        advisor.locked();
    }
    let header = fx.storage.load_header()?;
    let scope = fx.source.scope();
    let rescoped = early::scope(cfg, header.as_ref(), &scope)?;
    if let Some(rate_limited) = early::admit(cfg, fx.storage)? {
        return Ok(rate_limited);
    }
    // A moved tip is a wake in all likelihood: git walks the new commits
    // while the state loads. Should the verdict be no wake after all (the
    // commits touched nothing watched), the load is dropped, its errors too.
    let known = header
        .as_ref()
        .and_then(|h| h.wake.tip.as_ref())
        .filter(|_| !rescoped);
    let preloaded = fx.source.begin(known).then(|| fx.storage.load());
    let look = early::look(cfg, header, (scope, rescoped), fx.source)?;
    if !look.verdict.wake {
        early::record_start(cfg, fx.storage)?;
        return early::idle(cfg, &look, fx.storage, fx.source);
    }

    let mut state = wake_state(&look, preloaded, fx)?;
    state.files.set_rules(SUMMARY_RULES);
    // An outage tick that learns nothing must not rewrite the state: what
    // it loaded is kept to compare with once the source was asked.
    let outage = (look.verdict.reason == Reason::ShaUnavailable).then(|| state.clone());
    let journal = fx.storage.journal_read()?;
    let mut upgraded: Vec<String> = identity::upgrade(&mut state, cfg).into_iter().collect();
    upgraded.extend(clock::reset_jumps(&mut state, cfg.now));
    waiting::adopt(&mut state, cfg.now);
    let capped = state.llm.budget.capped;
    let mut work = Work::new(cfg, &look, fx);
    work.open_ledger(&mut state)?;
    let spent = work.spend(&mut state, &look);
    let (settled, wanted) = work.plan(&mut state, &look.verdict, look.head.as_deref())?;
    if work.listing_failed && outage.as_ref() == Some(&state) {
        let notes = std::mem::take(&mut work.notes);
        drop(work);
        let (storage, source) = (&mut *fx.storage, &*fx.source);
        return outage::unlearned(cfg, &look, storage, source, (&state, &journal), notes);
    }
    // A shard that could not be read would make its files look new: stop
    // before anything is judged (or paid for).
    if let Some(e) = state.files.error() {
        anyhow::bail!("{e} {}", work.not_saved());
    }
    let queue = work.queue(&mut state, wanted);
    work.prepare_sandbox(&mut state);
    let files = work.judge(&mut state, &queue)?;
    let done = work.finish(&mut state, spent, &files);

    let mut notes: Vec<String> = upgraded.into_iter().chain(done.notes).collect();
    notes.extend(capped_note(state.llm.budget.capped.saturating_sub(capped)));
    let counts = save::tally(cfg, &mut state, &files, &mut notes);
    notes.extend(waiting::notes(&state, &files, cfg.now));
    save::summarise(cfg, &mut state, &look, settled, journal);
    let mut report = TickReport::new(
        exit::for_reason(look.verdict.reason),
        report::reported(&look.verdict),
        cfg.dry_run,
    );
    report.writes = done.writes;
    report.sandbox = done.sandbox;
    report.notes = notes;
    report.outage = (look.verdict.reason == Reason::ShaUnavailable).then_some(state.outage);
    state.wake.reader = fx.source.request_counts().reader.map(str::to_string);
    let publisher = fx.publisher.as_deref_mut().map(|p| p as &mut dyn Publisher);
    early::record_start(cfg, fx.storage)?;
    save::write(cfg, &mut state, fx.storage, publisher, &mut report)?;

    report.head = look.head;
    report.pending = state.backlog.len() as u64;
    report.files = files;
    report.counts = counts;
    report.requests = fx.source.requests();
    report.requests_by_kind = fx.source.request_counts();
    report.reader = report.requests_by_kind.reader;
    report.slept_ms = fx.source.waits_ms();
    report.slept_ms.extend(done.slept_ms);
    report.llm_calls = done.llm_calls;
    report.advisor = if cfg.advisor.is_some() { "on" } else { "off" };
    if cfg.advisor.is_none() && report.counts.contains_key("needs_review") {
        report.notes.push(ADVISOR_HINT.into());
    }
    report.file_reads = done.reads;
    report.fresh_evaluations = done.fresh;
    if fx.last {
        std::mem::forget(state);
    }
    Ok(report)
}

/// Calls whose reported cost was above the per-call ceiling: counted at it,
/// and said, for a cost like that is a peer's error more likely than a bill.
fn capped_note(n: u64) -> Option<String> {
    (n > 0).then(|| {
        format!(
            "{n} call(s) reported a cost above ${} and were counted at ${0}; check the cost the agent or the proxy reports",
            crate::state::bounds::MAX_CALL_USD
        )
    })
}

/// The state a wake works on: the one loaded while git walked the new
/// commits, or loaded now.
fn wake_state(
    look: &Look,
    preloaded: Option<Result<Option<State>>>,
    fx: &mut Effects,
) -> Result<State> {
    // The contents the wake reads come from a child that can start while
    // the state loads (`git cat-file`: a millisecond or two of its own).
    if matches!(look.verdict.reason, Reason::RepoChanged | Reason::FirstRun) {
        fx.source.warm();
    }
    Ok(match preloaded {
        Some(loaded) => loaded?.unwrap_or_else(State::new),
        None if look.known_state => fx.storage.load()?.unwrap_or_else(State::new),
        None => State::new(),
    })
}

/// The working context of a waking tick: the effects it may use while it
/// plans and judges, and what it counts along the way.
struct Work<'a> {
    cfg: &'a TickConfig,
    /// Why this tick woke.
    reason: Reason,
    /// The file a review or a reconsideration is about: evaluated afresh.
    forced: Option<String>,
    /// The state moved here from another scope: list the tree whole.
    rescoped: bool,
    /// The head this tick looked at, and the autonomy trigger it answers.
    head: Option<String>,
    trigger: Option<String>,
    source: &'a mut dyn Source,
    advisor: Option<&'a mut dyn Advisor>,
    patcher: Option<&'a mut dyn Patcher>,
    /// Where the decision journal is written.
    storage: &'a mut dyn Storage,
    /// The decision journal: what was paid for before the state was saved.
    ledger: ledger::Ledger,
    /// Writes made while judging (patches), for the report.
    writes: Vec<WriteLog>,
    /// Sandbox commits of this tick, in the order they were made.
    sandbox_added: Vec<(String, String)>,
    /// The watched tip the sandbox was carried to before judging, and
    /// whether that rebuilt it.
    sandbox_tip: Option<String>,
    sandbox_rebuilt: bool,
    /// The sandbox holds commits sentinel did not make: rebuilt without
    /// them (git), or nothing built on it this tick (a shared branch).
    sandbox_strangers: Option<sandbox::Strangers>,
    evidence: &'a str,
    fresh: u64,
    reads: u64,
    /// Advisor calls made (on a dry run: that would have been made).
    consulted: u64,
    /// Calls to the source's `read` (a refused oversized file counts too:
    /// on GitLab it cost a request).
    read_calls: u64,
    /// Set when the source failed a read: no further reads this tick.
    source_down: Option<String>,
    /// Set when a listing failed: this tick learned nothing of the tree.
    listing_failed: bool,
    notes: Vec<String>,
    /// The last call failed for a reason about the file's content alone
    /// (context length, a content filter): it gives up at once.
    permanent: std::cell::Cell<bool>,
    /// The advisor id of the model a proxy fell back to for the last call,
    /// if one did: that model's decision, taken by `remember`.
    answered_by: std::cell::Cell<Option<String>>,
}

/// What the working stages hand over to save and report.
struct Done {
    writes: Vec<WriteLog>,
    sandbox: Option<SandboxReport>,
    notes: Vec<String>,
    llm_calls: u64,
    slept_ms: Vec<u64>,
    fresh: u64,
    reads: u64,
}

impl Work<'_> {
    /// A configuration error ends the tick; anything else is noted and the tick goes on.
    fn fatal(&self, e: SourceError) -> Result<SourceError> {
        match e {
            SourceError::Config(msg) => Err(anyhow::anyhow!("{msg} {}", self.not_saved())),
            other => Ok(other),
        }
    }

    /// `not_saved`, with what judging wrote before the tick stopped: the
    /// decision journal's entries (the next tick replays them) and the
    /// agent's worktree.
    fn not_saved(&self) -> String {
        let written = self.ledger.written;
        let agent =
            self.consulted > 0 && self.cfg.advisor.as_ref().is_some_and(|a| a.id == "agent");
        if self.cfg.dry_run || (written == 0 && !agent) {
            return not_saved(self.cfg);
        }
        let mut what = vec![format!(
            "its lock `{}`",
            crate::state::store::sidecar(&self.cfg.state, ".lock").display()
        )];
        if written > 0 {
            what.push(format!(
                "{written} entr{} of the decision journal `{}`, which the next tick replays",
                if written == 1 { "y" } else { "ies" },
                crate::state::store::sidecar(&self.cfg.state, ".decisions").display()
            ));
        }
        if agent {
            what.push("the agent's worktree".into());
        }
        format!("(the state was not saved; written: {})", what.join(", "))
    }
}

/// What a tick that stops on a setup error wrote, said exactly: the state
/// is untouched, and only the lock (with its directory) was created.
pub(crate) fn not_saved(cfg: &TickConfig) -> String {
    if cfg.dry_run {
        return "(a dry run: nothing was written)".into();
    }
    format!(
        "(the state was not saved; only its lock `{}` was written)",
        crate::state::store::sidecar(&cfg.state, ".lock").display()
    )
}

/// The hint a tick adds when it handed files over because no key was set.
pub const ADVISOR_HINT: &str =
    "advisor off: set OPENAI_API_KEY to have a model judge the needs_review files";

impl<'a> Work<'a> {
    /// Patches only when asked for and never on a dry run; the advisor only
    /// when the configuration has one.
    fn new(cfg: &'a TickConfig, look: &Look, fx: &'a mut Effects<'_>) -> Work<'a> {
        let patcher = match fx.patcher.as_deref_mut() {
            Some(p) if cfg.patches && !cfg.dry_run => Some(p as &mut dyn Patcher),
            _ => None,
        };
        let advisor = match fx.advisor.as_deref_mut() {
            Some(a) if cfg.advisor.is_some() => Some(a as &mut dyn Advisor),
            _ => None,
        };
        let (forced, trigger) = match (&look.verdict.reason, &look.verdict.detail) {
            (
                Reason::OpportunityDue | Reason::AutonomyDue,
                Some(Detail::File { path, trigger }),
            ) => (Some(path.clone()), trigger.clone()),
            _ => (None, None),
        };
        Work {
            cfg,
            reason: look.verdict.reason,
            forced,
            rescoped: look.rescoped,
            head: look.head.clone(),
            trigger,
            source: &mut *fx.source,
            advisor,
            patcher,
            storage: &mut *fx.storage,
            ledger: ledger::Ledger::default(),
            writes: Vec::new(),
            sandbox_added: Vec::new(),
            sandbox_tip: None,
            sandbox_rebuilt: false,
            sandbox_strangers: None,
            evidence: &cfg.evidence,
            fresh: 0,
            reads: 0,
            consulted: 0,
            read_calls: 0,
            source_down: None,
            listing_failed: false,
            notes: Vec::new(),
            permanent: std::cell::Cell::new(false),
            answered_by: std::cell::Cell::new(None),
        }
    }
}

impl Work<'_> {
    /// A reconsideration costs an autonomy token before it starts; `finish`
    /// refunds it if nothing was answered.
    fn spend(&self, state: &mut State, look: &Look) -> Option<autonomy::Spent> {
        if let Some(a) = &look.admission {
            autonomy::note(&mut state.autonomy, a);
        }
        match (&look.verdict.reason, &look.admission) {
            (Reason::AutonomyDue, Some(Admission::Eligible { path, trigger }))
                if state.files.contains_key(path) =>
            {
                Some(autonomy::spend(&mut state.autonomy, trigger, self.cfg.now))
            }
            _ => None,
        }
    }

    /// After judging: refund an unanswered reconsideration, try failed
    /// patches again, and count the advisor's attempts.
    fn finish(
        mut self,
        state: &mut State,
        spent: Option<autonomy::Spent>,
        files: &[FileReport],
    ) -> Done {
        if let Some(spent) = &spent {
            let answered = files.iter().any(|f| {
                f.path == spent.path
                    && !matches!(
                        f.outcome,
                        Outcome::Deferred
                            | Outcome::Held
                            | Outcome::Failed
                            | Outcome::BadResponse
                            | Outcome::GivenUp
                            | Outcome::Pending
                    )
            });
            if !answered {
                autonomy::refund(&mut state.autonomy, spent);
            }
        }
        if let Some(e) = &self.source_down {
            self.notes.push(format!(
                "stopped reading: {e}; the files not read wait in the backlog"
            ));
        }
        self.retry_patches(state);
        let sandbox = self.follow_sandbox(state);
        self.close_ledger(state, files);
        let llm_calls = self.advisor.as_ref().map_or(0, |a| a.calls());
        // Counters saturate: the state must load whatever they reach.
        use crate::state::bounds::add_count;
        state.llm.attempts = add_count(state.llm.attempts, llm_calls);
        if llm_calls > 0
            && let Some(seen) = self
                .cfg
                .advisor
                .as_ref()
                .and_then(|a| a.agent_sandbox.clone())
        {
            state.llm.agent_sandbox = Some(seen);
        }
        let n = &mut state.novelty;
        n.fresh_evaluations = add_count(n.fresh_evaluations, self.fresh);
        n.file_reads = add_count(n.file_reads, self.reads);
        Done {
            writes: self.writes,
            sandbox,
            notes: self.notes,
            llm_calls,
            slept_ms: self
                .advisor
                .as_ref()
                .map(|a| a.waits_ms())
                .unwrap_or_default(),
            fresh: self.fresh,
            reads: self.reads,
        }
    }
}

#[cfg(test)]
mod tests;

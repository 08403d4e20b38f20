//! consult: ask the advisor about a file local policy could not decide.
//! Size limit, circuit and budget come first; only an answer is a decision.

use anyhow::Result;

use super::Work;
use super::config::AdvisorSettings;
use super::judge::{Judgement, Subject};
use crate::gate::budget;
use crate::llm::bounds;
use crate::llm::client::Action;
use crate::llm::client::{AdviceRequest, Answer, Call, Outcome as CallOutcome};
use crate::llm::prices::{self, CostSource};
use crate::llm::protocol::{self, Circuit, Class};
use crate::publish::WriteLog;
use crate::state::{Outcome, Proposal, State};

/// Tokens of the system prompt and framing, added to a file's own size.
const PROMPT_OVERHEAD_TOKENS: u64 = 400;

impl Work<'_> {
    pub(super) fn consult(
        &mut self,
        state: &mut State,
        s: &Subject,
        bytes: Option<Vec<u8>>,
    ) -> Result<Judgement> {
        let settings = self.settings(state);
        let fleet = settings.fleet.clone();
        let _one_call_at_a_time = fleet
            .as_ref()
            .map(|f| f.calls.lock().unwrap_or_else(|e| e.into_inner()));
        self.check_real_price(state, &settings)?;
        let reserve = match self.preflight(state, s, &settings) {
            Ok(reserve) => reserve,
            Err(not_asked) => return Ok(not_asked),
        };
        // Whatever ends the call, the fleet's book takes its reservation back.
        let judged = self.consult_reserved(state, s, bytes, reserve, &settings);
        self.fleet_after(state, &settings);
        judged
    }

    /// A call once the budget admitted it: the bytes, the journal's intent,
    /// the call, its settlement and its judgement.
    fn consult_reserved(
        &mut self,
        state: &mut State,
        s: &Subject,
        bytes: Option<Vec<u8>>,
        reserve: f64,
        settings: &AdvisorSettings,
    ) -> Result<Judgement> {
        let bytes = match bytes {
            Some(b) => b,
            None => match self.bytes_for_advisor(state, s)? {
                Ok(b) => b,
                Err(not_asked) => return Ok(not_asked),
            },
        };
        // An agent known not to start reserves nothing: the tick stops here.
        if let Some(e) = self.advisor.as_ref().and_then(|a| a.fatal()) {
            anyhow::bail!("{e} {}", self.not_saved());
        }
        let call_seq = match self.reserve_call(s, reserve) {
            Ok(seq) => seq.unwrap_or_default(),
            Err(not_asked) => return Ok(not_asked),
        };
        self.consulted += 1;
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
        let previous = state.files[&s.path].decision.as_ref().map(|d| {
            let findings = state.llm.proposals.get(&s.path).map(|p| &p.findings);
            serde_json::json!({"outcome": d.outcome, "reason": d.reason, "findings": findings})
        });
        let left = settings.daily_budget - budget::spent_today(&state.llm.budget);
        if let Some(proxy) = &state.llm.proxy {
            advisor.assume_proxy(proxy);
        }
        let mut call = advisor.ask(
            &AdviceRequest {
                path: &s.path,
                role: s.role.as_str(),
                risk: s.risk.as_str(),
                content: &content,
                text: std::str::from_utf8(&bytes).ok(),
                fingerprint: &s.fingerprint,
                wake_reason: self.reason.as_str(),
                head: self.head.as_deref(),
                previous,
                trigger: self.trigger.as_deref(),
                budget_left_usd: Some(left.max(0.0)),
            },
            self.cfg.now,
        );
        if let Some(signal) = crate::llm::contain::interrupted() {
            // The reservation stays: the next tick takes it in as a killed call.
            return Err(anyhow::Error::new(crate::llm::contain::Interrupted {
                signal,
                during: format!("while the agent judged `{}`", s.path),
            }));
        }
        // A command that cannot run at all is a setup error, not a file's
        // fate: its reservation is taken back, nothing is spent or counted.
        if let Some(e) = advisor.fatal() {
            self.cancel_call(s, call_seq);
            anyhow::bail!("{e} {}", self.not_saved());
        }
        let seen = (advisor.moved_refs(), advisor.signs());
        let seen_fallback = seen.1.fallback.clone();
        self.refuse_secret_content(&s.path, &mut call);
        self.settle_call(state, (s, &model), (call_seq, &call), reserve, seen);
        Ok(self.judged(state, s, (&bytes, &model), call, &seen_fallback))
    }

    /// The judgement a settled call gives: the answer, said with the model
    /// that gave it when a proxy fell back, or the failure.
    fn judged(
        &mut self,
        state: &mut State,
        s: &Subject,
        (bytes, model): (&[u8], &str),
        call: Call,
        fallback: &Option<crate::llm::client::Fallback>,
    ) -> Judgement {
        match call.outcome {
            CallOutcome::Answered(answer) => {
                let mut judged = self.answered(state, s, Some(bytes), answer);
                if let Some(by) = self.fallback_said(s, model, fallback) {
                    judged.1.push_str(&by);
                }
                judged
            }
            CallOutcome::Failed {
                class,
                mut reason,
                hold_until,
            } => {
                // About this file's content alone: asking again cannot help.
                self.permanent.set(class.is_permanent_for_the_file());
                if class == Class::FileRequest {
                    reason.push_str(&too_large_for_the_model(s.facts.chars, &reason));
                }
                failed(
                    state,
                    class,
                    reason,
                    hold_until,
                    call.attempts,
                    self.cfg.now,
                )
            }
        }
    }

    /// A model whose one call is known to cost more than the whole daily
    /// budget can never be asked within it: a configuration error, said
    /// with both figures before anything is spent.
    fn check_real_price(&self, state: &State, settings: &AdvisorSettings) -> Result<()> {
        let Some(model) = self.advisor.as_ref().map(|a| a.model().to_string()) else {
            return Ok(());
        };
        let Some(price) = self.real_price(state, &model) else {
            return Ok(());
        };
        if price <= settings.daily_budget {
            return Ok(());
        }
        anyhow::bail!(
            "one call to `{model}` really cost ${price:.4} (the highest of the last {} days), more than the whole --daily-budget of ${:.2}: no call can fit; raise --daily-budget (SENTINEL_DAILY_BUDGET) above ${price:.4} or choose a cheaper model; nothing was spent {}",
            crate::gate::costs::REAL_PRICE_DAYS,
            settings.daily_budget,
            self.not_saved()
        )
    }

    /// The highest real cost of one call to `model` in the last days.
    fn real_price(&self, state: &State, model: &str) -> Option<f64> {
        crate::gate::costs::real_price(&state.llm.days, model, self.cfg.now.date_naive())
    }

    /// What the line says of an answer a proxy's fallback gave, and the
    /// decision's record of the model that gave it.
    fn fallback_said(
        &mut self,
        s: &Subject,
        asked: &str,
        fallback: &Option<crate::llm::client::Fallback>,
    ) -> Option<String> {
        let f = fallback.as_ref()?;
        let id = self.cfg.advisor.as_ref().map_or("", |a| a.id.as_str());
        let kind = id.split_once(':').map_or("openai", |(k, _)| k);
        self.answered_by.set(Some(format!("{kind}:{}", f.group)));
        let behind = f
            .model
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default();
        self.notes.push(format!(
            "`{}`: the proxy answered from {}{behind}, its fallback for `{asked}`: the decision is remembered as that model's, and reused for `{asked}` only with a word",
            s.path, f.group
        ));
        Some(format!(
            " [answered by {}{behind}, the proxy's fallback for {asked}]",
            f.group
        ))
    }

    /// Take in what the call showed beside its answer (refs the agent moved,
    /// the proxy its headers named and that proxy's own retries), then
    /// settle its cost and record it.
    fn settle_call(
        &mut self,
        state: &mut State,
        (s, model): (&Subject, &str),
        (call_seq, call): (u64, &Call),
        reserve: f64,
        (moved, signs): (Vec<crate::llm::worktree::Moved>, crate::llm::client::Signs),
    ) {
        self.agent_moved(state, &s.path, &moved);
        if let Some(proxy) = signs.proxy {
            state.llm.proxy = Some(proxy.to_string());
        }
        self.note_proxy_retries(s, &signs);
        // Known to be a proxy now: counted as a paid call, not a local one.
        let settings = self.settings(state);
        let reserve = reserve.max(self.reservation(state, s, &settings));
        let before = state.llm.budget.clone();
        let answered = matches!(call.outcome, CallOutcome::Answered(_));
        let cache_hit = signs.cache_hit && answered;
        settle(
            state,
            &settings,
            (call, cache_hit),
            reserve,
            model,
            self.cfg.now,
        );
        if let Some(f) = signs.fallback.as_ref().filter(|_| answered) {
            crate::gate::costs::record_fallback(
                &mut state.llm.days,
                &state.llm.budget,
                model,
                &f.group,
            );
        }
        settle_timed_out(state, signs.timed_out, reserve, self.cfg.now);
        self.record_call(state, (s, model), (call_seq, call), &before);
    }

    /// The advisor's settings for this call. A model without a price counts
    /// the real cost per call measured by `sentinel costs --calibrate`, once
    /// there is one.
    fn settings(&self, state: &State) -> AdvisorSettings {
        let mut settings = self
            .cfg
            .advisor
            .clone()
            .expect("consulted only with an advisor");
        if settings.price.is_none() {
            if let Some(real) = self
                .advisor
                .as_ref()
                .and_then(|a| state.llm.calibrated.get(a.model()))
            {
                settings.per_call = *real;
            } else if state.llm.proxy.is_some() {
                // A proxy forwards to a paid provider, even on this machine.
                settings.per_call = settings.per_call.max(settings.proxied_per_call);
            }
        }
        settings
    }

    /// What a call about this file reserves in the budget: the estimate,
    /// and never less than the highest real cost of one call to the model
    /// in the last days, so a known price cannot carry the day past its cap.
    fn reservation(&self, state: &State, s: &Subject, settings: &AdvisorSettings) -> f64 {
        let estimate = budget::reserve(
            settings.price.as_ref(),
            s.facts.chars,
            PROMPT_OVERHEAD_TOKENS,
            settings.max_tokens,
            settings.per_call,
        );
        let model = self.advisor.as_ref().map(|a| a.model().to_string());
        let known = model.and_then(|m| self.real_price(state, &m));
        known.map_or(estimate, |k| estimate.max(k))
    }

    /// A proxy that retried on its own made more upstream calls than
    /// sentinel's attempts: say how many, once per call.
    fn note_proxy_retries(&mut self, s: &Subject, signs: &crate::llm::client::Signs) {
        if signs.proxy_retries == 0 {
            return;
        }
        let proxy = signs.proxy.unwrap_or("the proxy");
        self.notes.push(format!(
            "`{}`: {proxy} retried on its own {} time(s): this call cost {} upstream calls or more; turn the proxy's retries off (docs/proxy.md)",
            s.path,
            signs.proxy_retries,
            1 + signs.proxy_retries
        ));
    }

    /// The checks before a call: size, circuit, budget. `Ok` is the amount
    /// reserved for the call; `Err` the outcome of a file not asked.
    fn preflight(
        &self,
        state: &mut State,
        s: &Subject,
        settings: &AdvisorSettings,
    ) -> std::result::Result<f64, Judgement> {
        let now = self.cfg.now;
        if s.facts.chars > self.cfg.max_file_bytes {
            return Err((
                Outcome::TooLarge,
                format!(
                    "{} bytes is over --max-file-bytes {}; not sent to the model",
                    s.facts.chars, self.cfg.max_file_bytes
                ),
                None,
            ));
        }
        // A circuit another project of the fleet opened holds this one too.
        let mut book = settings.fleet.as_ref().map(|f| (f.id, fleet_book(f)));
        let own = state.llm.circuit.clone().map(|c| (c, ""));
        let shared = (book.as_ref())
            .and_then(|(_, b)| b.circuit.clone())
            .map(|c| (c, " by the fleet"));
        if let Some((c, by)) = own
            .into_iter()
            .chain(shared)
            .find(|(c, _)| protocol::is_open(c, now))
        {
            return Err((
                Outcome::Held,
                format!(
                    "provider held{by} until {} ({}): {}",
                    c.until.to_rfc3339(),
                    c.class.as_str(),
                    c.advice
                ),
                None,
            ));
        }
        let reserve = self.reservation(state, s, settings);
        // A fleet's budget is one for all its projects: what the others
        // spent today, or hold for a call under way, is not this one's.
        let others = book.as_ref().map_or(0.0, |(id, b)| b.others(*id));
        let fleet_limit = (settings.daily_budget - others).max(0.0);
        let own = settings.fleet.as_ref().and_then(|f| f.project_budget);
        let limit = own.map_or(fleet_limit, |own| own.min(fleet_limit));
        if let Err(why) = budget::admit(&mut state.llm.budget, limit, reserve, now) {
            let fleet = match (book.is_some(), own) {
                (true, Some(own)) if own < fleet_limit => {
                    format!(
                        " (the fleet's, less ${others:.4} its other projects spent; this project's --project-budget is ${own:.2})"
                    )
                }
                (true, _) => {
                    format!(" (the fleet's, less ${others:.4} its other projects spent)")
                }
                (false, _) => String::new(),
            };
            return Err((
                Outcome::Deferred,
                format!(
                    "{why}: ${:.4} spent today, this call could cost ${reserve:.4} of the ${:.2} limit{fleet}",
                    budget::spent_today(&state.llm.budget),
                    settings.daily_budget
                ),
                None,
            ));
        }
        if let Some((id, b)) = book.as_mut() {
            *b.pending.entry(*id).or_default() += reserve;
        }
        Ok(reserve)
    }

    /// After a call: the fleet's book learns this project's spend today in
    /// place of what it reserved, and its circuit when open and longer.
    fn fleet_after(&self, state: &State, settings: &AdvisorSettings) {
        let Some(f) = settings.fleet.as_ref() else {
            return;
        };
        let now = self.cfg.now;
        let mut book = fleet_book(f);
        book.pending.remove(&f.id);
        book.spent
            .insert(f.id, budget::spent_today(&state.llm.budget).max(0.0));
        let open = |c: &Circuit| protocol::is_open(c, now);
        if let Some(c) = state.llm.circuit.as_ref().filter(|c| open(c))
            && book
                .circuit
                .as_ref()
                .is_none_or(|b| !open(b) || b.until < c.until)
        {
            book.circuit = Some(c.clone());
        }
    }

    /// The bytes to send when the facts were remembered and the file was not
    /// read in this tick.
    fn bytes_for_advisor(
        &mut self,
        state: &State,
        s: &Subject,
    ) -> Result<std::result::Result<Vec<u8>, Judgement>> {
        let blob = state.files[&s.path].blob.clone();
        Ok(match self.read(&s.path, &blob)? {
            Ok((_, Some(b))) => Ok(b),
            Ok((_, None)) => Err((
                Outcome::TooLarge,
                "over the size limit; not sent to the model".into(),
                None,
            )),
            Err(e) => Err((
                Outcome::Failed,
                format!("could not read the file for the advisor: {e}"),
                None,
            )),
        })
    }

    /// An answer closes the circuit; an EVOLVE opens a proposal (and, with
    /// patches on, commits its content to the sandbox branch).
    pub(super) fn answered(
        &mut self,
        state: &mut State,
        s: &Subject,
        bytes: Option<&[u8]>,
        mut a: Answer,
    ) -> Judgement {
        state.llm.circuit = None;
        self.bound(s, bytes, &mut a);
        if matches!(a.action, Action::Skip) {
            return (Outcome::LlmSkip, a.reason, None);
        }
        let mut proposal = Proposal {
            fingerprint: s.fingerprint.clone(),
            reason: a.reason.clone(),
            findings: a.findings.clone(),
            ts: self.cfg.now,
            stale: false,
            patch_commit: None,
            patch_pending: None,
        };
        if let (Some(content), true) = (&a.content, self.patcher.is_some()) {
            match self.patch_checked(&s.path, bytes, content) {
                Ok(()) => {
                    // Remembered before the commit: the content is the
                    // agent's output whether or not the commit lands.
                    if let Some(r) = state.files.get_mut(&s.path) {
                        crate::gate::rewrites::record(
                            r,
                            &super::content_hash(content.as_bytes()),
                            self.cfg.now,
                        );
                    }
                    proposal.patch_pending = Some(content.clone());
                    self.commit_patch(&s.path, &mut proposal);
                }
                Err(why) => self.writes.push(WriteLog {
                    kind: "patch",
                    target: s.path.clone(),
                    ok: false,
                    detail: format!("not committed: {why}"),
                }),
            }
        }
        state.llm.proposals.insert(s.path.clone(), proposal);
        (Outcome::Evolve, a.reason, Some(a.findings))
    }

    /// Bound what the answer leaves in the state and the reports (see
    /// `llm::bounds`), and note what was cut. Without the bytes, a file
    /// cannot have more lines than bytes.
    fn bound(&mut self, s: &Subject, bytes: Option<&[u8]>, a: &mut Answer) {
        let left_out = bounds::bound(a);
        let lines = bytes.map_or(s.facts.chars.max(1), bounds::line_count);
        let moved = bounds::within(&mut a.findings, lines);
        if left_out > 0 {
            self.notes.push(format!(
                "`{}`: the model sent {} findings; the first {} are kept",
                s.path,
                left_out + a.findings.len(),
                bounds::MAX_FINDINGS
            ));
        }
        if moved > 0 {
            self.notes.push(format!(
                "`{}`: {moved} finding(s) named a line outside the file's {lines} lines; they are reported on line 1",
                s.path
            ));
        }
    }

    /// A proposed content carrying a secret's value is refused, never
    /// altered (a changed secret breaks the code it is in) and never kept:
    /// it is dropped before the journal or the state can hold it.
    fn refuse_secret_content(&mut self, path: &str, call: &mut Call) {
        let CallOutcome::Answered(a) = &mut call.outcome else {
            return;
        };
        if !a
            .content
            .as_deref()
            .is_some_and(crate::redact::holds_secret)
        {
            return;
        }
        a.content = None;
        let why = crate::patch::secret_refusal(path);
        self.notes.push(format!("patch {why}"));
        self.writes.push(WriteLog {
            kind: "patch",
            target: path.to_string(),
            ok: false,
            detail: why,
        });
    }

    /// Commit a proposal's pending content to the sandbox branch. A failure
    /// keeps it pending for a later wake: one attempt per wake, no loop.
    /// The decision journal holds the intent before the commit and the
    /// commit id after it; without the intent nothing is committed.
    pub(super) fn commit_patch(&mut self, path: &str, proposal: &mut Proposal) {
        // Committed byte for byte: a content carrying a secret (a state
        // written before they were refused) is refused, never altered.
        let Some(content) = proposal.patch_pending.clone() else {
            return;
        };
        if crate::redact::holds_secret(&content) {
            self.notes
                .push(format!("patch {}", crate::patch::secret_refusal(path)));
            proposal.patch_pending = None;
            return;
        }
        if self.patcher.is_none() || self.patched_before(path, &content, proposal) {
            return;
        }
        let intent = self.intend(path, &content);
        let Some(patcher) = self.patcher.as_mut() else {
            return;
        };
        let target = format!("{path} on {}", patcher.target());
        // The reason is the model's or the agent's: redacted before it is cut
        // and committed, so no piece of a secret survives the cut.
        let message = crate::patch::commit_message(
            path,
            &crate::redact::text(&proposal.reason),
            &proposal.fingerprint,
        );
        let result = match intent {
            Ok(()) => patcher.commit(path, &content, &message),
            Err(why) => Err(format!("not committed: {why}")),
        };
        match result {
            Ok(commit) => {
                self.writes.push(WriteLog {
                    kind: "patch",
                    target,
                    ok: true,
                    detail: format!("commit {commit}"),
                });
                self.committed(path, &content, &commit);
                self.sandbox_added.push((path.to_string(), commit.clone()));
                proposal.patch_commit = Some(commit);
                proposal.patch_pending = None;
            }
            Err(why) => {
                // Waiting cannot change a refusal: the proposal is asked
                // again when the file changes.
                if why.starts_with(crate::patch::REFUSED) {
                    self.notes.push(format!("patch {why}"));
                    proposal.patch_pending = None;
                }
                self.writes.push(WriteLog {
                    kind: "patch",
                    target,
                    ok: false,
                    detail: why,
                });
            }
        }
    }

    /// Try again the patches whose commit failed on an earlier wake.
    pub(super) fn retry_patches(&mut self, state: &mut State) {
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
}

/// Settle the budget with what the call really cost, and count it per day:
/// the cost reported for the call first, then the price table, then the
/// per-call estimate.
fn settle(
    state: &mut State,
    settings: &AdvisorSettings,
    (call, cache_hit): (&Call, bool),
    reserve: f64,
    model: &str,
    now: chrono::DateTime<chrono::Utc>,
) {
    let answered = matches!(call.outcome, CallOutcome::Answered(_));
    // A proxy reports 0 for a call it could not price: the table, or the
    // per-call estimate, knows better. A server on this machine may say 0.
    let proxied = state.llm.proxy.is_some();
    let reported = call
        .cost_usd
        .filter(|c| *c > 0.0 || (!proxied && (settings.price.is_none() || call.usage.is_none())));
    let mut real = None;
    let source = if cache_hit {
        // Answered from the proxy's cache: no upstream call was billed.
        budget::settle(&mut state.llm.budget, 0.0, false, now);
        Some(CostSource::CacheHit)
    } else if let Some(cost) = reported {
        // Measured by whoever answered: better than any price table. A
        // figure past the per-call ceiling is counted at it, but is no price
        // to reserve by: it says the peer's number is not one.
        if !budget::settle(&mut state.llm.budget, cost, false, now) {
            real = Some(cost);
        }
        Some(CostSource::Reported)
    } else {
        match (&call.usage, &settings.price) {
            (Some(usage), Some(price)) => {
                let cost = prices::cost(price, usage);
                if !budget::settle(&mut state.llm.budget, cost, false, now) {
                    real = Some(cost);
                }
                Some(CostSource::PriceTable)
            }
            // Billed, but the real cost is unknown: count the estimate and say so.
            (Some(_), None) => {
                budget::settle(&mut state.llm.budget, settings.per_call, true, now);
                Some(CostSource::PerCall)
            }
            (None, _) if answered => {
                budget::settle(&mut state.llm.budget, reserve, true, now);
                Some(CostSource::Reservation)
            }
            (None, _) => None,
        }
    };
    crate::gate::costs::record(
        &mut state.llm.days,
        &state.llm.budget,
        model,
        u64::from(call.attempts),
    );
    if let Some(source) = source {
        crate::gate::costs::record_source(&mut state.llm.days, &state.llm.budget, source);
    }
    if let Some(cost) = real {
        crate::gate::costs::record_real_cost(&mut state.llm.days, &state.llm.budget, model, cost);
    }
}

/// The fleet's book, whoever held it last (a tick that panicked while
/// holding it left it whole: each change is one assignment).
fn fleet_book(f: &crate::tick::FleetShare) -> std::sync::MutexGuard<'_, crate::tick::FleetBook> {
    f.book.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a file too large for the model says beside the peer's words: its
/// size, and the limit the peer named, so a person knows by how much.
fn too_large_for_the_model(bytes: u64, said: &str) -> String {
    let limit = protocol::named_limit(said)
        .map(|l| format!("; the model's limit: {l}"))
        .unwrap_or_default();
    format!(
        "; the file is {bytes} bytes (about {} tokens){limit}; only this file waits, the others are asked",
        bytes.div_ceil(4)
    )
}

/// Attempts that timed out: the provider may have answered, and billed,
/// each after sentinel hung up. Each counts as an estimated call at what
/// was reserved for it; `sentinel costs` can correct the figure later.
fn settle_timed_out(
    state: &mut State,
    timed_out: u32,
    reserve: f64,
    now: chrono::DateTime<chrono::Utc>,
) {
    for _ in 0..timed_out {
        budget::settle(&mut state.llm.budget, reserve, true, now);
        crate::gate::costs::record_source(
            &mut state.llm.days,
            &state.llm.budget,
            CostSource::TimedOut,
        );
    }
    let usd = reserve.max(0.0) * f64::from(timed_out);
    crate::gate::costs::record_timed_out(
        &mut state.llm.days,
        &state.llm.budget,
        u64::from(timed_out),
        usd,
    );
}

/// A call that produced no decision: counted per class, and the circuit
/// opened when the class calls for it.
pub(super) fn failed(
    state: &mut State,
    class: Class,
    reason: String,
    hold_until: Option<chrono::DateTime<chrono::Utc>>,
    attempts: u32,
    now: chrono::DateTime<chrono::Utc>,
) -> Judgement {
    *state
        .llm
        .failures
        .entry(class.as_str().to_string())
        .or_default() += 1;
    // A failure that repeats after its hold ended holds longer each time,
    // whatever it says (invariant 24).
    let (hold_until, streak) = match hold_until {
        Some(until) => {
            let (until, streak) = protocol::escalated(state.llm.circuit.as_ref(), until, now);
            (Some(until), streak)
        }
        None => (None, 0),
    };
    if let Some(until) = hold_until {
        let mut circuit = Circuit::new(class, reason.clone(), until);
        circuit.opened = Some(now);
        circuit.streak = streak;
        state.llm.circuit = Some(circuit);
    }
    let outcome = if class == Class::BadResponse {
        Outcome::BadResponse
    } else {
        Outcome::Failed
    };
    let grown = match streak {
        0 => String::new(),
        n => format!(
            " (the first call after the last hold failed again: {n} in a row, each hold twice the last, 24 h at most)"
        ),
    };
    let held = hold_until
        .map(|u| format!("; provider held until {}{grown}", u.to_rfc3339()))
        .unwrap_or_default();
    let plural = if attempts == 1 { "" } else { "s" };
    (
        outcome,
        format!(
            "{} after {attempts} attempt{plural}: {reason}{held}",
            class.as_str()
        ),
        None,
    )
}

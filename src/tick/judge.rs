//! judge: one file at a time, cheapest first: remembered facts or one read,
//! the novelty gate, local policy, and only then the advisor (`consult`).

use anyhow::Result;
use chrono::{DateTime, Utc};

use super::Work;
use super::facts::{fingerprint_as, read_facts, status_of};
use super::report::FileReport;
use crate::gate::deps;
use crate::gate::lifecycle::{self, Status};
use crate::gate::novelty::{self, Novelty};
use crate::gate::observation::{self, ObserveInput};
use crate::gate::policy::{self, Risk, Role};
use crate::gate::retry;
use crate::gate::rewrites;
use crate::gate::wake::Reason;
use crate::llm::client::Finding;
use crate::llm::protocol::{self, Class};
use crate::source::SourceError;
use crate::state::{BY_LOCAL, ContentFacts, Decision, FileRecord, Outcome, State};

/// A file about to be judged: what the novelty gate needs and what the
/// advisor is told.
pub(super) struct Subject {
    pub path: String,
    pub role: Role,
    pub risk: Risk,
    pub status: Status,
    pub facts: Seen,
    pub fingerprint: String,
    pub novelty: Novelty,
    pub resolved: deps::Resolved,
    /// The record's rollback streak, which judging the file does not change.
    pub streak: u32,
    /// `(at_once, failures)` when the file gave up at this fingerprint.
    pub gave_up: Option<(bool, u32)>,
}

/// What judging needs of a file's content facts once the record keeps them
/// (its hash and imports stay with the record).
pub(super) struct Seen {
    pub chars: u64,
}

/// The decision of one fresh evaluation: outcome, reason, and the advisor's
/// findings for an `evolve`.
pub(super) type Judgement = (Outcome, String, Option<Vec<Finding>>);

impl Work<'_> {
    /// Judge the queued files that are still in the tree, in order.
    pub(super) fn judge(
        &mut self,
        state: &mut State,
        candidates: &[String],
    ) -> Result<Vec<FileReport>> {
        let mut out = Vec::with_capacity(candidates.len());
        self.announce_reads(state, candidates);
        for path in candidates {
            // Between files: a signal stops the tick before the next one.
            if let Some(signal) = crate::llm::contain::interrupted() {
                return Err(anyhow::Error::new(crate::llm::contain::Interrupted {
                    signal,
                    during: format!("before `{path}`, between files"),
                }));
            }
            if let Some(streak) = state.files.get(path).map(|r| r.rollback_streak) {
                out.push(self.judge_one(state, path, streak)?);
            }
        }
        Ok(out)
    }

    /// Tell the source which content ids `facts` is going to read, in
    /// order: the candidates whose facts are not remembered, no more than
    /// the read limit leaves. A source may then stream them.
    fn announce_reads(&mut self, state: &State, candidates: &[String]) {
        if self.cannot_read().is_some() {
            return;
        }
        let limit = self.cfg.max_reads as u64;
        let left = if limit > 0 {
            (limit - self.read_calls.min(limit)) as usize
        } else {
            usize::MAX
        };
        let wanted: Vec<String> = candidates
            .iter()
            .filter_map(|path| state.files.get(path))
            .filter(|record| record.content.is_none())
            .map(|record| record.blob.clone())
            .collect();
        // Many reads may come cheaper all at once (GitLab's archive); what
        // that brings is no read against the limit.
        let at = self.head.as_deref().unwrap_or(&self.cfg.rev);
        let notes = self
            .source
            .gather(at, &wanted, self.cfg.max_file_bytes, state.files.len());
        self.notes.extend(notes);
        let blobs: Vec<String> = wanted
            .into_iter()
            .filter(|blob| !self.source.holds(blob))
            .take(left)
            .collect();
        if !blobs.is_empty() {
            self.source.prefetch(&blobs);
        }
    }

    fn judge_one(&mut self, state: &mut State, path: &str, streak: u32) -> Result<FileReport> {
        self.grade_at(state, path, streak);
        let (facts, bytes) = match self.facts(state, path)? {
            Ok(known) => known,
            Err(report) => return Ok(report),
        };
        let mut subject = self.subject(state, path, facts);
        if let Some(report) = given_up(&subject) {
            return Ok(report);
        }
        // A scheduled review or a reconsideration is an event in its own
        // right: a remembered SKIP must not swallow it.
        let forced = self.forced.as_deref() == Some(path);
        if !subject.novelty.is_novel() && !forced {
            return Ok(self.reuse(state, &subject));
        }
        let local = self.local(&subject);
        if let Some(judged) = self.own_or_stuck(state, &subject, local.outcome) {
            self.fresh += 1;
            return Ok(self.remember(state, &mut subject, forced, judged, BY_LOCAL));
        }
        let cfg = self.cfg;
        let (judgement, by) = match &cfg.advisor {
            Some(advisor) if local.outcome == Outcome::NeedsReview => {
                let by = advisor.id.as_str();
                // Paid for by a tick whose save did not happen: taken, not asked again.
                if let Some(paid) = self.replayed(state, &subject, bytes.as_deref()) {
                    self.fresh += 1;
                    return Ok(self.remember(state, &mut subject, forced, paid, by));
                }
                // Only what costs is bounded: a consultation, and the read it
                // may need when the bytes are not at hand.
                let have_bytes = bytes.is_some() || subject.facts.chars > cfg.max_file_bytes;
                if let Some(why) = self.cannot_consult(have_bytes) {
                    return Ok(self.pending(path, subject.novelty, Some(subject.fingerprint), why));
                }
                match self.consult(state, &subject, bytes)? {
                    // The decision journal cannot be written: no call was made.
                    (Outcome::Pending, why, _) if self.ledger.down().is_some() => {
                        return Ok(self.pending(
                            path,
                            subject.novelty,
                            Some(subject.fingerprint),
                            why,
                        ));
                    }
                    judged => {
                        self.fresh += 1;
                        (judged, by)
                    }
                }
            }
            _ => {
                self.fresh += 1;
                ((local.outcome, local.reason, None), BY_LOCAL)
            }
        };
        Ok(self.remember(state, &mut subject, forced, judgement, by))
    }

    /// Facts about the current bytes: remembered per content id, so an
    /// unchanged file is never read again to learn them. `Err` is the
    /// report of a file that could not be looked at in this tick.
    #[allow(clippy::type_complexity)]
    fn facts(
        &mut self,
        state: &State,
        path: &str,
    ) -> Result<std::result::Result<(ContentFacts, Option<Vec<u8>>), FileReport>> {
        let record = &state.files[path];
        if let Some(f) = record.content.as_ref() {
            return Ok(Ok((f.clone(), None)));
        }
        let novelty = if record.fingerprint.is_some() {
            Novelty::Changed
        } else {
            Novelty::FirstSeen
        };
        let blob = record.blob.as_str();
        if let Some(why) = self.cannot_read().filter(|_| !self.source.holds(blob)) {
            return Ok(Err(self.pending(path, novelty, None, why)));
        }
        Ok(match self.read(path, blob)? {
            Ok((f, bytes)) => Ok((f, bytes)),
            Err(e) => Err(FileReport::new(
                path,
                Outcome::Pending,
                format!("{}; could not read the file: {e}", novelty.as_str()),
                novelty,
            )),
        })
    }

    /// Fingerprint the file against the remembered tree, ask the novelty
    /// gate, and remember the facts of its bytes.
    fn subject(&self, state: &mut State, path: &str, facts: ContentFacts) -> Subject {
        let (role, risk) = policy::classify(path);
        let record = &state.files[path];
        let status = status_of(record, path, &self.cfg.locks, self.cfg.now);
        let (fingerprint, resolved) = fingerprint_as(
            &state.files,
            path,
            &facts,
            self.evidence,
            status,
            (role, risk),
            record.rollback_streak,
        );
        let record_streak = record.rollback_streak;
        let gave_up = record
            .retry
            .as_ref()
            .filter(|r| r.given_up() && r.fingerprint == fingerprint)
            .map(|r| (r.at_once, r.failures));
        let deps_known = resolved.unresolved.is_empty();
        let advisor = self.cfg.advisor.as_ref().map(|a| a.id.as_str());
        let novelty = novelty::evaluate(Some(record), &fingerprint, deps_known, advisor);
        let seen = Seen { chars: facts.chars };
        if let Some(r) = state.files.get_mut(path) {
            r.content = Some(facts);
        }
        Subject {
            path: path.to_string(),
            role,
            risk,
            status,
            facts: seen,
            fingerprint,
            novelty,
            resolved,
            streak: record_streak,
            gave_up,
        }
    }

    /// The remembered decision still answers the question: reuse it.
    fn reuse(&self, state: &mut State, s: &Subject) -> FileReport {
        let record = state
            .files
            .get_mut(&s.path)
            .expect("candidate is in the tree");
        novelty::reuse(
            record,
            novelty::estimate_tokens(s.facts.chars),
            self.cfg.now,
        );
        let advisor = self.cfg.advisor.as_ref().map(|a| a.id.as_str());
        let prev = record
            .decision
            .as_mut()
            .expect("unchanged implies a decision");
        let mut reason = format!("unchanged since {}: {}", prev.outcome.as_str(), prev.reason);
        match prev.answered_by.as_deref() {
            // The model that answered is the one asked now: the decision is its own.
            Some(answered) if Some(answered) == advisor => {
                prev.by = Some(answered.to_string());
                prev.answered_by = None;
            }
            Some(answered) => reason.push_str(&format!(
                "; answered by {answered}, the proxy's fallback for {}",
                prev.by.as_deref().unwrap_or("the model asked")
            )),
            None => {}
        }
        let (prev_outcome, prev_reason) = (prev.outcome, prev.reason.clone());
        if prev_outcome == Outcome::Evolve {
            // Only with the advisor off: an EVOLVE is otherwise asked again.
            reason.push_str("; kept while the advisor is off");
        }
        if matches!(prev_outcome, Outcome::LocalSkip | Outcome::LlmSkip) {
            self.observe(state, s, &prev_reason);
        }
        FileReport::new(&s.path, Outcome::Reused, reason, s.novelty)
            .with_fingerprint(Some(s.fingerprint.clone()))
    }

    /// The watched branch holds exactly what an agent or a patch wrote: a
    /// SKIP without a call. A file that would be handed over again after
    /// too many rewrites is stuck instead.
    fn own_or_stuck(&self, state: &mut State, s: &Subject, local: Outcome) -> Option<Judgement> {
        let now = self.cfg.now;
        let record = state.files.get_mut(&s.path)?;
        // The record holds the facts of the bytes judged (`subject`).
        let own =
            (record.content.as_ref()).is_some_and(|c| rewrites::is_own_output(record, &c.hash));
        if own {
            let reason = "own output: the watched branch holds exactly what the agent wrote".into();
            return Some((Outcome::LocalSkip, reason, None));
        }
        let until = rewrites::stuck_until(record, self.cfg.max_rewrites, now);
        // A mark whose rewrites left the window has expired.
        record.stuck &= until.is_some();
        let (Outcome::NeedsReview, Some(until)) = (local, until) else {
            return None;
        };
        record.stuck = true;
        let reason = format!(
            "rewritten {} time(s) in 7 days (--max-rewrites {}): not handed over again until {} or `sentinel reset {}`",
            rewrites::in_window(record, now),
            self.cfg.max_rewrites,
            until.to_rfc3339(),
            s.path
        );
        Some((Outcome::Stuck, reason, None))
    }

    /// Local policy decides what it can; `needs_review` is for the advisor,
    /// or handed over as such when the advisor is off.
    fn local(&self, s: &Subject) -> policy::LocalDecision {
        if s.status == Status::Locked {
            return policy::LocalDecision {
                outcome: Outcome::LocalSkip,
                reason: "locked by configuration: never judged".into(),
            };
        }
        policy::decide(s.role, s.risk)
    }

    /// Remember a fresh decision: dependencies, review schedule, the
    /// decision itself, the proposal it closes and the watch it opens.
    fn remember(
        &self,
        state: &mut State,
        s: &mut Subject,
        forced: bool,
        (outcome, mut reason, findings): Judgement,
        by: &str,
    ) -> FileReport {
        let now = self.cfg.now;
        if !s.resolved.unresolved.is_empty() {
            reason.push_str(&format!(
                "; unresolved imports: {}",
                s.resolved.unresolved.join(", ")
            ));
        }
        let circuit = self.open_circuit(state);
        let record = state
            .files
            .get_mut(&s.path)
            .expect("candidate is in the tree");
        let (outcome, reason) = self.wait(record, s, (outcome, reason), circuit);
        // The subject ends here: its dependencies move into the record.
        record.deps = std::mem::take(&mut s.resolved.paths);
        if forced && self.reason == Reason::OpportunityDue {
            let identical = record
                .decision
                .as_ref()
                .is_some_and(|d| d.outcome == outcome && d.reason == reason);
            record.review = Some(lifecycle::after_review(
                record.review.as_ref(),
                identical,
                now,
            ));
        }
        let decision = Decision {
            outcome,
            reason: reason.clone(),
            ts: now,
            by: Some(by.to_string()),
            answered_by: self.answered_by.take(),
        };
        novelty::remember(record, &s.fingerprint, decision, now);
        // A proposal stays open until the file is judged again; a failed or
        // held look is no judgement.
        if matches!(
            outcome,
            Outcome::LocalSkip | Outcome::LlmSkip | Outcome::NeedsReview
        ) {
            state.llm.proposals.remove(&s.path);
        }
        if matches!(
            outcome,
            Outcome::LocalSkip | Outcome::LlmSkip | Outcome::Deferred
        ) {
            self.observe(state, s, &reason);
        }
        // The subject ends here: its path and fingerprint move into the report.
        FileReport {
            path: std::mem::take(&mut s.path),
            outcome,
            reason,
            novelty: Some(s.novelty),
            fingerprint: Some(std::mem::take(&mut s.fingerprint)),
            findings,
        }
    }

    /// Remember how a file whose judgement did not happen waits, and give
    /// up after `MAX_FAILURES` failures at one fingerprint. A decision waits
    /// for nothing.
    fn wait(
        &self,
        record: &mut FileRecord,
        s: &Subject,
        (outcome, reason): (Outcome, String),
        circuit: Option<(Class, DateTime<Utc>)>,
    ) -> (Outcome, String) {
        let now = self.cfg.now;
        record.retry = retry::after(record.retry.as_ref(), &s.fingerprint, outcome, circuit, now);
        let permanent = self.permanent.take();
        if permanent && let Some(r) = record.retry.as_mut() {
            r.failures = r.failures.max(retry::MAX_FAILURES);
            r.at_once = true;
        }
        match &record.retry {
            Some(r) if r.given_up() && permanent => (
                Outcome::GivenUp,
                format!(
                    "{reason}; gave up at once, as asking again about this content cannot help: asked again when the file changes, or after `sentinel reset {}`",
                    s.path
                ),
            ),
            Some(r) if r.given_up() => (
                Outcome::GivenUp,
                format!(
                    "{reason}; gave up after {} failures at this fingerprint: asked again when the file changes, or after `sentinel reset {}`",
                    r.failures, s.path
                ),
            ),
            _ => (outcome, reason),
        }
    }

    /// The advisor's circuit breaker while it is open: how a failed look waits.
    fn open_circuit(&self, state: &State) -> Option<(Class, DateTime<Utc>)> {
        let now = self.cfg.now;
        state
            .llm
            .circuit
            .as_ref()
            .filter(|c| protocol::is_open(c, now))
            .map(|c| (c.class, c.until))
    }

    /// A file left for a later tick, and why.
    fn pending(
        &self,
        path: &str,
        novelty: Novelty,
        fingerprint: Option<String>,
        why: String,
    ) -> FileReport {
        FileReport::new(
            path,
            Outcome::Pending,
            format!("{}; left for a later tick: {why}", novelty.as_str()),
            novelty,
        )
        .with_fingerprint(fingerprint)
    }

    /// Why no further read may be made in this tick, if so.
    fn cannot_read(&self) -> Option<String> {
        if self.source_down.is_some() {
            return Some("the source is unavailable".into());
        }
        let limit = self.cfg.max_reads as u64;
        (limit > 0 && self.read_calls >= limit)
            .then(|| format!("the read limit (--max-reads {limit}) is reached"))
    }

    /// Why no further consultation may start in this tick, if so. `have_bytes`
    /// says whether the advisor can do without a read. Only calls that
    /// happen count: a file held by the circuit or deferred by the budget
    /// costs nothing.
    fn cannot_consult(&self, have_bytes: bool) -> Option<String> {
        if let Some(why) = self.ledger.down() {
            return Some(format!("not asked: {why}"));
        }
        let limit = self.cfg.batch as u64;
        if limit > 0 && self.consulted >= limit {
            return Some(format!("the batch limit (--batch {limit}) is reached"));
        }
        // A tick fits its schedule: once the model's share of it is spent,
        // the rest waits for the next tick.
        if let Some(why) = self.advisor.as_ref().and_then(|a| a.out_of_time()) {
            return Some(why);
        }
        if have_bytes { None } else { self.cannot_read() }
    }

    /// One read through the source. A configuration error ends the tick; a
    /// source that cannot answer now is remembered so no further reads are
    /// tried this tick (the inner `Err`).
    #[allow(clippy::type_complexity)]
    pub(super) fn read(
        &mut self,
        path: &str,
        blob: &str,
    ) -> Result<std::result::Result<(ContentFacts, Option<Vec<u8>>), SourceError>> {
        // Bytes the source already holds cost no request.
        if !self.source.holds(blob) {
            self.read_calls += 1;
        }
        let limit = self.cfg.max_file_bytes;
        match read_facts(&mut *self.source, path, blob, limit, &mut self.notes) {
            Ok((f, b)) => {
                self.reads += u64::from(b.is_some());
                Ok(Ok((f, b)))
            }
            Err(e) => {
                let e = self.fatal(e)?;
                self.source_down = Some(e.to_string());
                Ok(Err(e))
            }
        }
    }

    /// Grade the file's open watch if its window elapsed or an incident
    /// happened; a file that left the tree closes its watch ungraded.
    pub(super) fn grade(&mut self, state: &mut State, path: &str) {
        match state.files.get(path) {
            Some(r) => self.grade_at(state, path, r.rollback_streak),
            None => {
                state.observations.open.remove(path);
            }
        }
    }

    /// `grade` for a file in the tree whose rollback streak is at hand.
    fn grade_at(&mut self, state: &mut State, path: &str, streak: u32) {
        observation::resolve_if_due(
            &mut state.observations,
            path,
            streak,
            self.cfg.locked(path),
            self.cfg.now,
            self.cfg.resolved_limit,
        );
    }

    /// Label a SKIP (observation mode). It never changes the decision.
    fn observe(&self, state: &mut State, s: &Subject, reason: &str) {
        let streak = s.streak;
        observation::label(
            &mut state.observations,
            &s.path,
            &ObserveInput {
                reason,
                status: s.status.as_str(),
                role: s.role.as_str(),
                risk: s.risk.as_str(),
                confidence: policy::confidence(s.role, streak, 0),
                known_skip: s.role != Role::Unknown,
                rollback_streak: streak,
            },
            self.cfg.now,
            self.cfg.watch_limit,
        );
    }
}

/// A file that gave up at its current fingerprint is not asked again: it
/// says so, and waits for a change or `sentinel reset`.
fn given_up(s: &Subject) -> Option<FileReport> {
    let (at_once, failures) = s.gave_up?;
    let reason = if at_once {
        format!(
            "gave up at once, as asking again about this content cannot help; `sentinel reset {}` asks again",
            s.path
        )
    } else {
        format!(
            "gave up after {} failures at this fingerprint; `sentinel reset {}` asks again",
            failures, s.path
        )
    };
    Some(
        FileReport::new(&s.path, Outcome::GivenUp, reason, s.novelty)
            .with_fingerprint(Some(s.fingerprint.clone())),
    )
}

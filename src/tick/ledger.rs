//! ledger: the decision journal as the tick uses it, so that a paid answer
//! is paid once (invariant 16).
//!
//! Before a call the tick writes a reservation, after it the answer; before
//! a sandbox commit the intent, after it the commit id. When one of those
//! writes fails, no further call or commit is made in the tick. A tick whose
//! state lacks entries of the journal (the save failed, or the process died
//! before it) replays them:
//!
//! - spend: every answer and every reservation the state lacks is counted in
//!   the budget as it loads, a reservation without an answer (the process
//!   died during the call) at its reserved cost;
//! - an answer for a file whose current fingerprint is the one it answered
//!   is that file's decision, without a call; a failure replays as the same
//!   failure (and the same circuit);
//! - a reservation without an answer is a failure of class `unknown` for its
//!   file: one failed attempt for the retry rules, never a decision;
//! - a commit id becomes the proposal's `patch_commit`; an intent without
//!   one asks the sandbox branch whether it already holds that content, and
//!   commits only when it does not (not when the branch cannot tell);
//! - an answer the tick did not get to (the read limit, a source that stopped
//!   answering) is carried into the journal for a later tick, for 7 days.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use chrono::{DateTime, Duration, Utc};

use super::Work;
use super::consult::failed;
use super::judge::{Judgement, Subject};
use super::report::FileReport;
use crate::gate::budget::{self, Budget};
use crate::gate::costs;
use crate::llm::client::{Action, Answer, Call, Outcome as CallOutcome};
use crate::llm::protocol::Class;
use crate::publish::WriteLog;
use crate::state::bounds::add_count;
use crate::state::decisions::{Answered, Entry, Journal, Line, content_id};
use crate::state::storage::Storage;
use crate::state::{JournalMark, Outcome, Proposal, State};

/// How long an answer no tick got to is kept for a later one.
fn carry_for() -> Duration {
    Duration::days(7)
}

/// What a call the state lacks left behind, for its file and fingerprint.
enum Paid {
    Answered(DateTime<Utc>, Box<Answered>),
    /// A reservation without an answer: the call's end was never written.
    Interrupted(DateTime<Utc>, f64),
}

/// The journal of this tick: where entries go and what the state lacks.
#[derive(Default)]
pub(super) struct Ledger {
    /// The journal's epoch, or the one a new journal gets.
    epoch: u64,
    /// A journal exists: read at the start, or created by this tick.
    exists: bool,
    next_seq: u64,
    /// Off on a dry run, which writes nothing.
    writable: bool,
    paid: BTreeMap<(String, String), Paid>,
    /// Sandbox commits by (path, content id): the commit id, or `None` for
    /// an intent whose commit id was never written.
    sandbox: BTreeMap<(String, String), Option<String>>,
    /// Why no entry can be written: the first write that failed.
    down: Option<String>,
    replayed: u64,
    /// Entries this tick appended.
    pub(super) written: u64,
}

impl Ledger {
    /// Read the journal and count in `state` the spend it lacks.
    fn open(storage: &mut dyn Storage, state: &mut State, writable: bool) -> Result<Ledger> {
        let journal = storage.decisions_read()?;
        let mark = state.llm.decisions;
        let folded = if journal.epoch == Some(mark.epoch) {
            mark.folded
        } else {
            0
        };
        let mut ledger = Ledger {
            epoch: journal.epoch.unwrap_or(mark.epoch.wrapping_add(1)),
            exists: journal.epoch.is_some(),
            next_seq: journal.last_seq().max(folded) + 1,
            writable,
            ..Ledger::default()
        };
        ledger.take_in(state, &journal, mark);
        Ok(ledger)
    }

    fn take_in(&mut self, state: &mut State, journal: &Journal, mark: JournalMark) {
        let answered: BTreeSet<u64> = journal
            .unfolded(mark)
            .filter_map(|l| match &l.entry {
                Entry::Answer(a) => Some(a.call),
                _ => None,
            })
            .collect();
        for l in journal.unfolded(mark) {
            let path = l.path.clone();
            match &l.entry {
                Entry::Reserve {
                    fingerprint,
                    model,
                    reserved_usd,
                } if !answered.contains(&l.seq) => {
                    spend(state, model, Some((*reserved_usd, true)), 1, l.ts);
                    let paid = Paid::Interrupted(l.ts, *reserved_usd);
                    self.paid.insert((path, fingerprint.clone()), paid);
                }
                Entry::Reserve { .. } => {}
                Entry::Answer(a) if a.not_started => {}
                Entry::Answer(a) => {
                    if !a.carried {
                        let cost = a.billed.then_some((a.cost_usd, a.estimated));
                        spend(state, &a.model, cost, a.attempts, l.ts);
                    }
                    let key = (path, a.fingerprint.clone());
                    self.paid.insert(key, Paid::Answered(l.ts, a.clone()));
                }
                Entry::Intent { content_id } => {
                    self.sandbox.entry((path, content_id.clone())).or_default();
                }
                Entry::Commit { content_id, commit } => {
                    self.sandbox
                        .insert((path, content_id.clone()), Some(commit.clone()));
                }
            }
        }
    }

    /// Append one entry; `Err` says why not, and stops every later write.
    fn write(
        &mut self,
        storage: &mut dyn Storage,
        path: &str,
        ts: DateTime<Utc>,
        entry: Entry,
    ) -> std::result::Result<(), String> {
        if let Some(why) = &self.down {
            return Err(why.clone());
        }
        if !self.writable {
            return Ok(());
        }
        let line = Line {
            seq: self.next_seq,
            ts,
            path: path.to_string(),
            entry,
        };
        match storage.decisions_append(self.epoch, &line) {
            Ok(()) => {
                self.next_seq += 1;
                self.written += 1;
                self.exists = true;
                Ok(())
            }
            Err(e) => {
                let why = format!("{e:#}");
                self.down = Some(why.clone());
                Err(why)
            }
        }
    }

    /// Why no call or commit may be made, once a write failed.
    pub(super) fn down(&self) -> Option<&str> {
        self.down.as_deref()
    }

    /// The sandbox commits the journal recorded: sentinel's own, even
    /// when the state saved after them was lost.
    pub(super) fn sandbox_commits(&self) -> impl Iterator<Item = String> + '_ {
        self.sandbox.values().flatten().cloned()
    }
}

/// Count a call the state lacks: its cost when the budget counted it, and
/// its attempts per day and model.
fn spend(
    state: &mut State,
    model: &str,
    cost: Option<(f64, bool)>,
    attempts: u32,
    ts: DateTime<Utc>,
) {
    if let Some((usd, estimated)) = cost {
        budget::settle(&mut state.llm.budget, usd, estimated, ts);
    }
    costs::record(
        &mut state.llm.days,
        &state.llm.budget,
        model,
        u64::from(attempts),
    );
    state.llm.attempts = add_count(state.llm.attempts, u64::from(attempts));
}

impl Work<'_> {
    /// Read the decision journal of a waking tick.
    pub(super) fn open_ledger(&mut self, state: &mut State) -> Result<()> {
        self.ledger = Ledger::open(&mut *self.storage, state, !self.cfg.dry_run)?;
        Ok(())
    }

    /// The decision an earlier tick paid for, when the state lacks it and
    /// the file's fingerprint is the one it was paid for.
    pub(super) fn replayed(
        &mut self,
        state: &mut State,
        s: &Subject,
        bytes: Option<&[u8]>,
    ) -> Option<Judgement> {
        let paid = self
            .ledger
            .paid
            .remove(&(s.path.clone(), s.fingerprint.clone()))?;
        self.ledger.replayed += 1;
        let now = self.cfg.now;
        Some(match paid {
            Paid::Answered(_, a) => match a.outcome {
                Outcome::LlmSkip | Outcome::Evolve => {
                    let action = if a.outcome == Outcome::Evolve {
                        Action::Evolve
                    } else {
                        Action::Skip
                    };
                    let answer = Answer {
                        action,
                        reason: a.reason,
                        findings: a.findings,
                        content: a.content,
                    };
                    self.answered(state, s, bytes, answer)
                }
                _ => {
                    let class = a.class.unwrap_or(Class::Unknown);
                    failed(state, class, a.reason, a.hold_until, a.attempts, now)
                }
            },
            Paid::Interrupted(ts, reserved) => {
                let why = format!(
                    "the call started at {} left no answer in the decision journal (the tick \
                     was killed); its reserved ${reserved:.4} is counted as spent",
                    ts.to_rfc3339()
                );
                failed(state, Class::Unknown, why, None, 1, now)
            }
        })
    }

    /// Write the reservation before a call. `Ok(None)` on a dry run, which
    /// calls nothing; `Err` is the file not asked because the journal
    /// cannot be written.
    pub(super) fn reserve_call(
        &mut self,
        s: &Subject,
        reserved_usd: f64,
    ) -> std::result::Result<Option<u64>, Judgement> {
        let Some(advisor) = self.advisor.as_ref() else {
            return Ok(None);
        };
        let seq = self.ledger.next_seq;
        let entry = Entry::Reserve {
            fingerprint: s.fingerprint.clone(),
            model: advisor.model().to_string(),
            reserved_usd,
        };
        match self
            .ledger
            .write(&mut *self.storage, &s.path, self.cfg.now, entry)
        {
            Ok(()) => Ok(Some(seq)),
            Err(why) => Err((Outcome::Pending, format!("not asked: {why}"), None)),
        }
    }

    /// Take back the reservation `call_seq` of an agent that could not be
    /// started: no spend, no attempt, no decision for the next tick.
    pub(super) fn cancel_call(&mut self, s: &Subject, call_seq: u64) {
        if self.advisor.is_none() {
            return;
        }
        let entry = Entry::Answer(Box::new(Answered {
            call: call_seq,
            fingerprint: s.fingerprint.clone(),
            model: String::new(),
            outcome: Outcome::Failed,
            reason: "the agent could not be started".into(),
            findings: Vec::new(),
            content: None,
            class: None,
            hold_until: None,
            attempts: 0,
            usage: None,
            billed: false,
            cost_usd: 0.0,
            estimated: false,
            carried: false,
            not_started: true,
        }));
        let _ = self
            .ledger
            .write(&mut *self.storage, &s.path, self.cfg.now, entry);
    }

    /// Write how the call `call_seq` ended and what the budget counted for
    /// it (the difference between `before` and the state's budget).
    pub(super) fn record_call(
        &mut self,
        state: &State,
        (s, model): (&Subject, &str),
        (call_seq, call): (u64, &Call),
        before: &Budget,
    ) {
        let after = &state.llm.budget;
        let measured = after.lifetime_measured - before.lifetime_measured;
        let estimated = after.lifetime_estimated - before.lifetime_estimated;
        let mut answered = Answered {
            call: call_seq,
            fingerprint: s.fingerprint.clone(),
            model: model.to_string(),
            outcome: Outcome::Failed,
            reason: String::new(),
            findings: Vec::new(),
            content: None,
            class: None,
            hold_until: None,
            attempts: call.attempts,
            usage: call.usage,
            billed: after.lifetime_calls > before.lifetime_calls,
            cost_usd: measured + estimated,
            estimated: estimated > 0.0,
            carried: false,
            not_started: false,
        };
        match &call.outcome {
            CallOutcome::Answered(a) => {
                answered.outcome = match a.action {
                    Action::Skip => Outcome::LlmSkip,
                    Action::Evolve => Outcome::Evolve,
                };
                answered.reason = a.reason.clone();
                answered.findings = a.findings.clone();
                answered.content = a.content.clone();
            }
            CallOutcome::Failed {
                class,
                reason,
                hold_until,
            } => {
                if *class == Class::BadResponse {
                    answered.outcome = Outcome::BadResponse;
                }
                answered.reason = reason.clone();
                answered.class = Some(*class);
                answered.hold_until = *hold_until;
            }
        }
        let entry = Entry::Answer(Box::new(answered));
        // The call is made and counted in this state; a failed save after
        // it replays the reservation at its reserved cost.
        let _ = self
            .ledger
            .write(&mut *self.storage, &s.path, self.cfg.now, entry);
    }

    /// Whether the proposed `content` may be committed: checked against the
    /// file's bytes, or, when they were not read in this tick, known from
    /// the journal to have been checked by the tick that wrote the intent.
    pub(super) fn patch_checked(
        &self,
        path: &str,
        bytes: Option<&[u8]>,
        content: &str,
    ) -> std::result::Result<(), String> {
        match bytes {
            Some(b) => crate::patch::validate(b, content, self.cfg.max_file_bytes),
            None if self
                .ledger
                .sandbox
                .contains_key(&(path.to_string(), content_id(content))) =>
            {
                Ok(())
            }
            None => Err("the file was not read in this tick; tried again on a later wake".into()),
        }
    }

    /// A commit an earlier tick made, or may have made, of this content:
    /// recorded without committing again. `true` when nothing is to be
    /// committed now.
    pub(super) fn patched_before(
        &mut self,
        path: &str,
        content: &str,
        proposal: &mut Proposal,
    ) -> bool {
        let key = (path.to_string(), content_id(content));
        let Some(known) = self.ledger.sandbox.get(&key).cloned() else {
            return false;
        };
        let Some(patcher) = self.patcher.as_mut() else {
            return true;
        };
        let target = format!("{path} on {}", patcher.target());
        let (commit, how) = match known {
            Some(commit) => (commit, "the decision journal"),
            None => match patcher.holds(path, content) {
                Ok(Some(commit)) => (commit, "the sandbox branch"),
                Ok(None) => return false,
                Err(why) => {
                    self.writes.push(WriteLog {
                        kind: "patch",
                        target,
                        ok: false,
                        detail: format!(
                            "not committed: an earlier tick may have committed it, and the \
                             sandbox branch cannot tell ({why}); tried again on a later wake"
                        ),
                    });
                    return true;
                }
            },
        };
        self.writes.push(WriteLog {
            kind: "patch",
            target,
            ok: true,
            detail: format!("commit {commit}, made by an earlier tick (found in {how})"),
        });
        self.committed(path, content, &commit);
        proposal.patch_commit = Some(commit);
        proposal.patch_pending = None;
        true
    }

    /// Write the intent before a sandbox commit; `Err` is why not to commit.
    pub(super) fn intend(&mut self, path: &str, content: &str) -> std::result::Result<(), String> {
        let entry = Entry::Intent {
            content_id: content_id(content),
        };
        self.ledger
            .write(&mut *self.storage, path, self.cfg.now, entry)
    }

    /// Write the commit id after a sandbox commit.
    pub(super) fn committed(&mut self, path: &str, content: &str, commit: &str) {
        let id = content_id(content);
        let entry = Entry::Commit {
            content_id: id.clone(),
            commit: commit.to_string(),
        };
        self.ledger
            .sandbox
            .insert((path.to_string(), id), Some(commit.to_string()));
        // Without it a later tick asks the sandbox branch instead.
        let _ = self
            .ledger
            .write(&mut *self.storage, path, self.cfg.now, entry);
    }

    /// Before the save: say what the journal did, mark it as folded into
    /// the state, and carry the answers no file of this tick took.
    pub(super) fn close_ledger(&mut self, state: &mut State, files: &[FileReport]) {
        if self.ledger.replayed > 0 {
            self.notes.push(format!(
                "{} decision(s) paid for by an earlier tick whose state was not saved were taken \
                 from the decision journal, without a call",
                self.ledger.replayed
            ));
        }
        if let Some(why) = self.ledger.down() {
            self.notes.push(why.to_string());
        }
        if !self.ledger.exists || !self.ledger.writable {
            return;
        }
        state.llm.decisions = JournalMark {
            epoch: self.ledger.epoch,
            folded: self.ledger.next_seq - 1,
        };
        self.carry(state, files);
    }

    /// Copy the answers no file took into the journal, after the mark: the
    /// saved state lacks them, so a later tick can still take them.
    fn carry(&mut self, state: &State, files: &[FileReport]) {
        let now = self.cfg.now;
        let judged = |path: &str| {
            files
                .iter()
                .any(|f| f.path == path && f.outcome != Outcome::Pending)
        };
        let paid = std::mem::take(&mut self.ledger.paid);
        for ((path, _), paid) in paid {
            let Paid::Answered(ts, mut a) = paid else {
                continue;
            };
            let decision = matches!(a.outcome, Outcome::LlmSkip | Outcome::Evolve);
            if !decision || judged(&path) || !state.files.contains_key(&path) {
                continue;
            }
            if now - ts >= carry_for() {
                continue;
            }
            a.carried = true;
            let commits: Vec<(String, Option<String>)> = self
                .ledger
                .sandbox
                .iter()
                .filter(|((p, _), _)| *p == path)
                .map(|((_, id), c)| (id.clone(), c.clone()))
                .collect();
            let storage = &mut *self.storage;
            let _ = self.ledger.write(storage, &path, ts, Entry::Answer(a));
            for (content_id, commit) in commits {
                let entry = match commit {
                    Some(commit) => Entry::Commit { content_id, commit },
                    None => Entry::Intent { content_id },
                };
                let _ = self.ledger.write(storage, &path, ts, entry);
            }
        }
    }
}

//! plan: bring the remembered tree up to the head and choose the files the
//! wake is about, then queue them with what earlier wakes left over.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use chrono::{DateTime, Utc};

use super::Work;
use crate::gate::deps;
use crate::gate::observation;
use crate::gate::retry;
use crate::gate::wake::{Detail, Reason, Verdict};
use crate::source::{Change, Listing};
use crate::state::files;
use crate::state::{FileRecord, Outcome, Proposal, State};

impl Work<'_> {
    /// Bring the remembered tree up to the head and return the files the
    /// wake is about. `settled` is false when the tree could not be learned,
    /// or only in part (an incomplete listing): the head is then not
    /// remembered, so a later tick looks at the files not seen again.
    pub(super) fn plan(
        &mut self,
        state: &mut State,
        verdict: &Verdict,
        head: Option<&str>,
    ) -> Result<(bool, Vec<String>)> {
        if self.rescoped && verdict.reason == Reason::RepoChanged {
            let at = head.unwrap_or(&self.cfg.rev).to_string();
            self.notes
                .push("moved to a new scope: the tree was listed whole".into());
            return Ok(match self.list(state, &at)? {
                Some(c) => (!c.incomplete, every_path(state, c)),
                None => (false, Vec::new()),
            });
        }
        Ok(match verdict.reason {
            Reason::FirstRun | Reason::ShaUnavailable => {
                let at = head.unwrap_or(&self.cfg.rev).to_string();
                match self.list(state, &at)? {
                    Some(c) => (!c.incomplete, every_path(state, c)),
                    None => (false, Vec::new()),
                }
            }
            Reason::RepoChanged => match &verdict.detail {
                Some(Detail::Change { from, to }) => match self.follow(state, from, to)? {
                    Some(changed) => (!changed.incomplete, with_dependents(state, changed)),
                    None => (false, Vec::new()),
                },
                _ => (false, Vec::new()),
            },
            Reason::EvidenceChanged => (true, state.files.keys().cloned().collect()),
            Reason::ObservationDue => {
                self.grade_due(state);
                (true, Vec::new())
            }
            _ => (true, Vec::new()),
        })
    }

    /// The order of work: the file a wake is about first, whatever its place
    /// in the batch; then the wake's own files; then what earlier wakes left
    /// over; then files whose judgement did not happen (deferred, held,
    /// failed) and whose not-before time passed: a wake takes them along,
    /// and the header's `next_retry` wakes a tick for them.
    pub(super) fn queue(&self, state: &mut State, mut candidates: Vec<String>) -> Vec<String> {
        if let Some(path) = &self.forced {
            candidates.retain(|p| p != path);
            candidates.insert(0, path.clone());
        }
        let old_backlog = std::mem::take(&mut state.backlog);
        let retries = self.retries(state);
        if old_backlog.is_empty() && retries.is_empty() {
            return candidates;
        }
        let mut seen: BTreeSet<String> = candidates.iter().cloned().collect();
        for p in old_backlog.into_iter().chain(retries) {
            if seen.insert(p.clone()) {
                candidates.push(p);
            }
        }
        candidates
    }

    /// Files to try again: only wakes that look at the tree take them along
    /// (a review, a reconsideration or a grading wake is about its own
    /// files), only with an advisor, only while the provider is not held
    /// (as the header says: the wake gate reads the same), and only once a
    /// file's not-before time has passed. Hand-overs made while the advisor
    /// was off are offered to it here too.
    fn retries(&self, state: &State) -> Vec<String> {
        let retry_wake = matches!(
            self.reason,
            Reason::FirstRun
                | Reason::ShaUnavailable
                | Reason::RepoChanged
                | Reason::EvidenceChanged
                | Reason::Backlog
        );
        let now = self.cfg.now;
        let askable = retry_wake
            && self.cfg.advisor.is_some()
            && retry::provider_free(state.provider_held_until, now);
        if !askable {
            return Vec::new();
        }
        // Only the buckets holding a due retry or a hand-over are read.
        state
            .files
            .load_where(|s| s.awaiting > 0 || s.retry.is_some_and(|t| t <= now));
        state
            .files
            .loaded()
            .filter(|(_, r)| {
                r.retry.as_ref().is_some_and(|w| w.due(now))
                    || r.decision
                        .as_ref()
                        .is_some_and(|d| d.outcome == Outcome::NeedsReview)
            })
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// List the tree at `at` and make it the remembered one; `None` when the
    /// listing failed (noted). An incomplete listing is noted too.
    fn list(&mut self, state: &mut State, at: &str) -> Result<Option<Changed>> {
        let listed = self.source.listing(at);
        self.notes.extend(self.source.take_notes());
        match listed {
            Ok(listing) => {
                if let Some(why) = &listing.incomplete {
                    self.notes.push(format!(
                        "the listing is incomplete: {why}; no file was forgotten"
                    ));
                }
                Ok(Some(self.sync(state, listing)))
            }
            Err(e) => {
                let e = self.fatal(e)?;
                self.notes.push(format!("listing failed: {e}"));
                self.listing_failed = true;
                Ok(None)
            }
        }
    }

    /// The paths changed between two heads: one compare call, the listing
    /// when that fails; then the rollback streaks of the range.
    fn follow(&mut self, state: &mut State, from: &str, to: &str) -> Result<Option<Changed>> {
        let compared = self.source.changes(from, to);
        self.notes.extend(self.source.take_notes());
        let changed = match compared {
            Ok(changes) => Some(apply_changes(state, changes, self.cfg.now)),
            Err(e) => {
                let e = self.fatal(e)?;
                self.notes
                    .push(format!("compare failed ({e}); fell back to the listing"));
                self.list(state, to)?
            }
        };
        let Some(mut changed) = changed else {
            return Ok(None);
        };
        self.rollbacks(state, from, to, &mut changed)?;
        Ok(Some(changed))
    }

    /// Grade every watch past its checkpoint. Grading needs no file: the
    /// streak and the lock are in the state.
    fn grade_due(&mut self, state: &mut State) {
        let totals = &state.observations.totals;
        let (before_ok, before_wrong) = (totals.resolved_correct, totals.resolved_wrong);
        for path in observation::due(&state.observations, self.cfg.now) {
            self.grade(state, &path);
        }
        let t = &state.observations.totals;
        let (ok, wrong) = (
            t.resolved_correct - before_ok,
            t.resolved_wrong - before_wrong,
        );
        self.notes.push(format!(
            "graded {} prediction(s): {ok} correct, {wrong} wrong",
            ok + wrong
        ));
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
                let e = self.fatal(e)?;
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

    /// Bring the remembered tree up to a listing; returns the changed paths.
    /// Only a complete listing forgets the files it did not see: one that
    /// stopped early may have missed them on a page it could not read.
    fn sync(&mut self, state: &mut State, listing: Listing) -> Changed {
        let mut changed = Changed {
            incomplete: !listing.is_complete(),
            ..Changed::default()
        };
        let entries = listing.entries;
        // Into an empty tree (a first run) every entry is new: the records
        // are built in one pass, in path order, without a lookup each.
        if state.files.is_empty() && strictly_sorted(&entries) {
            let now = self.cfg.now;
            changed.added = entries.iter().map(|e| e.path.clone()).collect();
            state.files.extend_new(
                entries
                    .into_iter()
                    .map(|e| (e.path, new_record(e.blob, now))),
            );
            return changed;
        }
        if !changed.incomplete {
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
                        .insert(e.path.clone(), new_record(e.blob.clone(), self.cfg.now));
                    changed.added.push(e.path.clone());
                }
            }
        }
        changed
    }
}

/// Whether the listing names each path once, in path order.
fn strictly_sorted(entries: &[crate::source::Entry]) -> bool {
    entries.windows(2).all(|w| w[0].path < w[1].path)
}

/// Every remembered path, in path order, after a listing: what the listing
/// added, when it added every one of them in that order (a first run), so
/// the paths are not gathered and copied again.
fn every_path(state: &State, c: Changed) -> Vec<String> {
    let all_added = c.modified.is_empty()
        && c.deleted.is_empty()
        && c.added.len() == state.files.len()
        && c.added.windows(2).all(|w| w[0] < w[1]);
    if all_added {
        c.added
    } else {
        state.files.keys().cloned().collect()
    }
}

fn new_record(blob: String, now: DateTime<Utc>) -> FileRecord {
    FileRecord {
        blob,
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
    /// Learned from an incomplete listing: files not seen were kept.
    incomplete: bool,
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
                    state.files.insert(path.clone(), new_record(blob, now));
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
    // The backlog holds only remembered files: only a deletion removes one.
    let deleted: BTreeSet<&String> = changed.deleted.iter().collect();
    state.backlog.retain(|p| !deleted.contains(p));
    changed
}

/// The changed files that still exist, then the files that depend on any
/// changed one. When paths appeared, files whose imports could not all be
/// resolved and could resolve to one of them are looked at again too. (A
/// path that disappeared resolves nothing new: the files that imported it
/// are its dependents.)
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
    // The reverse-import index answers without reading every record.
    let mut dependents: BTreeSet<String> = touched
        .iter()
        .flat_map(|t| state.files.importers_of(t))
        .collect();
    dependents.extend(resolvable_by(state, &changed.added));
    for d in dependents {
        if seen.insert(d.clone()) {
            out.push(d);
        }
    }
    out
}

/// The files with unresolved imports that one of the `added` paths could
/// resolve: only the shards whose filter holds an added path's directory
/// are read.
fn resolvable_by(state: &State, added: &[String]) -> Vec<String> {
    if added.is_empty() {
        return Vec::new();
    }
    let dirs: BTreeSet<&str> = added.iter().map(|p| deps::parent(p)).collect();
    state.files.load_where(|s| {
        let filter = files::DirFilter::from_hex(&s.unknown_dirs);
        s.unknown_deps > 0 && dirs.iter().any(|d| filter.may_hold(d))
    });
    let added: BTreeSet<&str> = added.iter().map(String::as_str).collect();
    state
        .files
        .loaded()
        .filter(|(_, r)| files::deps_unknown(r))
        .filter(|(p, r)| {
            r.content.as_ref().is_some_and(|c| {
                c.imports
                    .iter()
                    .flat_map(|spec| deps::candidates(p, spec))
                    .any(|c| added.contains(c.as_str()))
            })
        })
        .map(|(p, _)| p.clone())
        .collect()
}

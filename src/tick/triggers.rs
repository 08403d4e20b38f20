//! triggers: the autonomy admission's state-derived triggers, kept in the
//! manifest's header (at most `MAX_TRIGGERS`) and brought up to date from
//! the shards a wake read, so that no wake reads every shard holding one.
//!
//! A record changes only in a loaded bucket, so the triggers of a bucket
//! the wake did not read are still those of its records. Wrong predictions
//! and open proposals live in the manifest itself. Only with autonomy on
//! does a wake read shards for the list: to fill it when it holds fewer
//! than `MAX_TRIGGERS` and a shard's summary counts a trigger it lacks (each
//! such read adds one at least, so there are at most `MAX_TRIGGERS`).

use std::collections::{BTreeMap, BTreeSet};

use super::config::TickConfig;
use crate::gate::autonomy::{Mode, Trigger, TriggerKind};
use crate::gate::observation;
use crate::state::files::bucket_of;
use crate::state::{FileRecord, State, files};

/// Most state-derived triggers kept in the header.
pub(super) const MAX_TRIGGERS: usize = 50;

/// The triggers the state provides, for the autonomy admission: an
/// unresolved rollback, a wrong stability prediction, an open proposal,
/// imports that do not resolve. Their identity is the condition, not the
/// time, so a persistent condition is one question, answered once. In
/// path order, then in that order of kinds.
pub(super) fn derive(state: &State, cfg: &TickConfig) -> Vec<Trigger> {
    let on = cfg.autonomy.mode == Mode::Controlled;
    let files = &state.files;
    let n = files.buckets();
    let loaded = |p: &str| files.is_loaded(bucket_of(p, n));
    let mut out: Vec<Trigger> = Vec::new();
    // The record triggers of the buckets not read: as derived before.
    out.extend(
        state
            .autonomy_triggers
            .iter()
            .filter(|t| from_record(t.kind) && !loaded(&t.path) && !cfg.locked(&t.path))
            .cloned(),
    );
    // In path order, and the list keeps the first `MAX_TRIGGERS` by path:
    // a record after that many of the loaded ones' triggers adds none.
    let mut from_loaded = 0;
    for (path, r) in files.loaded() {
        if from_loaded >= MAX_TRIGGERS {
            break;
        }
        if !cfg.locked(path) {
            let mine = of_record(path, r);
            from_loaded += mine.len();
            out.extend(mine);
        }
    }
    // A path of a bucket not read exists as it did at the last save: known
    // when the list named it, asked (a read) otherwise, with autonomy on.
    let named: BTreeSet<&str> = state
        .autonomy_triggers
        .iter()
        .map(|t| t.path.as_str())
        .collect();
    let mut asks = MAX_TRIGGERS;
    let mut exists = |p: &str| {
        if loaded(p) {
            return files.contains_key(p);
        }
        if named.contains(p) {
            return true;
        }
        if !on || asks == 0 {
            return false;
        }
        asks -= 1;
        files.contains_key(p)
    };
    let resolved: BTreeSet<&str> = state
        .observations
        .resolved
        .iter()
        .map(|r| r.path.as_str())
        .collect();
    for path in resolved {
        if let Some(w) = observation::last_wrong(&state.observations, path)
            && !cfg.locked(path)
            && exists(path)
        {
            out.push(Trigger {
                path: path.to_string(),
                kind: TriggerKind::WrongPrediction,
                detail: w.resolved.to_rfc3339(),
                ts: w.resolved,
            });
        }
    }
    for (path, p) in &state.llm.proposals {
        if !cfg.locked(path) && exists(path) {
            out.push(Trigger {
                path: path.clone(),
                kind: TriggerKind::OpenProposal,
                detail: p.fingerprint.clone(),
                ts: p.ts,
            });
        }
    }
    let mut out = ordered(out);
    if on {
        fill(state, cfg, &mut out);
    }
    out
}

/// Read the shards whose summary counts a record trigger the list lacks,
/// until the list is full.
fn fill(state: &State, cfg: &TickConfig, out: &mut Vec<Trigger>) {
    let files = &state.files;
    let n = files.buckets();
    for i in 0..n {
        if out.len() >= MAX_TRIGGERS {
            return;
        }
        let Some(summary) = files.summary(i).filter(|_| !files.is_loaded(i)) else {
            continue;
        };
        let listed: BTreeSet<&str> = out
            .iter()
            .filter(|t| from_record(t.kind) && bucket_of(&t.path, n) == i)
            .map(|t| t.path.as_str())
            .collect();
        if summary.triggers <= listed.len() as u64 {
            continue;
        }
        let mut more: Vec<Trigger> = out.clone();
        for (path, r) in files.bucket_records(i) {
            if !listed.contains(path.as_str()) && !cfg.locked(path) {
                more.extend(of_record(path, r));
            }
        }
        *out = ordered(more);
    }
}

/// Sorted by path, then kind; duplicates dropped; at most `MAX_TRIGGERS`.
fn ordered(list: Vec<Trigger>) -> Vec<Trigger> {
    let mut by: BTreeMap<(String, u8), Trigger> = BTreeMap::new();
    for t in list {
        by.entry((t.path.clone(), rank(t.kind))).or_insert(t);
    }
    by.into_values().take(MAX_TRIGGERS).collect()
}

fn rank(kind: TriggerKind) -> u8 {
    match kind {
        TriggerKind::UnresolvedRollback => 0,
        TriggerKind::WrongPrediction => 1,
        TriggerKind::OpenProposal => 2,
        TriggerKind::DependencyDrift => 3,
        TriggerKind::RuntimeError => 4,
    }
}

/// Whether a trigger of this kind comes from the record alone.
fn from_record(kind: TriggerKind) -> bool {
    matches!(
        kind,
        TriggerKind::UnresolvedRollback | TriggerKind::DependencyDrift
    )
}

/// The triggers a record gives by itself: a rollback streak, imports that
/// do not resolve.
fn of_record(path: &str, r: &FileRecord) -> Vec<Trigger> {
    let ts = r.changed_ts.unwrap_or(r.last_ts);
    let trigger = |kind, detail| Trigger {
        path: path.to_string(),
        kind,
        detail,
        ts,
    };
    let mut out = Vec::new();
    if r.rollback_streak > 0 {
        let detail = format!("streak={} blob={}", r.rollback_streak, r.blob);
        out.push(trigger(TriggerKind::UnresolvedRollback, detail));
    }
    if files::deps_unknown(r) {
        out.push(trigger(
            TriggerKind::DependencyDrift,
            format!("deps-unknown blob={}", r.blob),
        ));
    }
    out
}

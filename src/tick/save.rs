//! save: fold what the tick learned into the state (tallies, bounds, the
//! header's summaries), then write: dashboard, state, journal, reports.

use std::collections::BTreeMap;

use anyhow::Result;

use super::config::TickConfig;
use super::early::Look;
use super::report::{FileReport, TickReport};
use crate::gate::novelty;
use crate::gate::observation;
use crate::gate::outage;
use crate::gate::wake::{self, Reason};
use crate::llm::protocol;
use crate::publish::{Publisher, WriteLog};
use crate::report::dashboard;
use crate::state::bounds::{add_count, bump};
use crate::state::storage::Storage;
use crate::state::{Outcome, State, journal};

/// Bound the memory, queue what the batch left over, and count outcomes.
/// Returns the per-outcome counts of this tick.
pub(super) fn tally(
    cfg: &TickConfig,
    state: &mut State,
    files: &[FileReport],
    notes: &mut Vec<String>,
) -> BTreeMap<&'static str, u64> {
    // Only a tree over the limit is read whole to find the oldest records.
    if cfg.max_files > 0 && state.files.len() > cfg.max_files {
        for gone in novelty::evict(state.files.iter(), state.files.len(), cfg.max_files) {
            state.files.remove(&gone);
        }
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
    for f in files {
        *counts.entry(f.outcome.as_str()).or_default() += 1;
        if f.outcome != Outcome::Pending {
            bump(&mut state.outcomes, f.outcome.as_str(), 1);
        }
    }
    let reused = counts.get("reused").copied().unwrap_or(0);
    let saved = files
        .iter()
        .filter(|f| f.outcome == Outcome::Reused)
        .filter_map(|f| state.files.get(&f.path))
        .map(|r| novelty::estimate_tokens(r.content.as_ref().map_or(0, |c| c.chars)))
        .fold(0, add_count);
    let n = &mut state.novelty;
    n.reuses = add_count(n.reuses, reused);
    n.estimated_tokens_saved = add_count(n.estimated_tokens_saved, saved);
    counts
}

/// Refresh what the header summarises for the cheap stages of the next
/// tick, and remember this wake.
pub(super) fn summarise(
    cfg: &TickConfig,
    state: &mut State,
    look: &Look,
    settled: bool,
    journal: journal::Contents,
) {
    let unsaved = journal.unfolded(state.journal);
    let outages = journal.unfolded_outages(state.journal).len() as u64;
    state.scope = Some(look.scope.clone());
    state.next_observation_due = observation::next_due(&state.observations);
    state.provider_held_until = state
        .llm
        .circuit
        .as_ref()
        .filter(|c| protocol::is_open(c, cfg.now))
        .map(|c| c.until);
    // The per-bucket summaries answer for the buckets this wake did not read.
    state.files.set_locks(&cfg.locks);
    let figures = state.files.figures();
    super::identity::summarise(state, &figures);
    state.next_retry = figures.retry;
    state.autonomy_triggers = super::triggers::derive(state, cfg);
    state.next_review = figures.review;
    wake::remember(
        &mut state.wake,
        &look.verdict,
        unsaved,
        look.head.as_deref(),
        &cfg.evidence,
        settled,
        cfg.now,
    );
    // Always replaced: a pair from another scope, or from before a failed
    // lookup, must not answer the next tick's head.
    state.wake.tip = look
        .tip
        .clone()
        .zip(look.head.clone())
        .map(|(tip, head)| crate::state::schema::TipHead { tip, head });
    // Outage ticks that learned nothing woke (exit 11) without a save:
    // they are counted now, in order with the no-ops around them.
    let w = &mut state.wake;
    w.ticks = add_count(w.ticks, outages);
    w.wakes = add_count(w.wakes, outages);
    if outages > 0 {
        bump(&mut w.by_reason, Reason::ShaUnavailable.as_str(), outages);
    }
    let replayed = outage::so_far(&journal, state.outage, state.journal);
    let this = look.verdict.reason == Reason::ShaUnavailable;
    state.outage = outage::record(replayed, this, cfg.now);
    state.journal = journal::fold(state.journal, &journal);
}

/// Write what a waking tick produced, dashboard first: the hash saved with
/// the state is then the hash of what was really published, and a failure
/// keeps the old hash so a later wake tries again.
pub(super) fn write(
    cfg: &TickConfig,
    state: &mut State,
    storage: &mut dyn Storage,
    publisher: Option<&mut dyn Publisher>,
    report: &mut TickReport,
) -> Result<()> {
    if cfg.dry_run {
        return Ok(());
    }
    let dashboard_failed = publisher.and_then(|p| publish(cfg, state, p, report));
    let bytes = match storage.save(state) {
        Ok(bytes) => bytes,
        Err(e) => {
            report.notes.extend(dashboard_failed);
            return Err(e);
        }
    };
    report.state_written = true;
    // Published before the save so the saved hash is what was published;
    // the failure is told once the save's outcome is known.
    if let Some(detail) = dashboard_failed {
        report.notes.push(format!(
            "the state `{}` was saved; only the dashboard failed: {detail}; the next waking tick tries again",
            cfg.state.display()
        ));
    }
    report.writes.push(WriteLog {
        kind: "state",
        target: cfg.state.display().to_string(),
        ok: true,
        detail: format!("{bytes} bytes"),
    });
    storage.journal_clear()?;
    // The saved state holds the decision journal up to its mark; a failure
    // to remove it costs nothing (the mark says it is folded).
    if let Err(e) = storage.decisions_clear(state.llm.decisions) {
        report.notes.push(format!("{e:#}"));
    }
    if let Some(path) = &cfg.codequality {
        state.files.load_where(|s| s.stuck > 0);
        let stuck: Vec<String> = state
            .files
            .loaded()
            .filter(|(_, r)| r.stuck)
            .map(|(p, _)| p.clone())
            .collect();
        let bytes = crate::report::codequality::render_with(&state.llm.proposals, &stuck)?;
        // The state is saved by now: say so, and which write failed.
        storage.write_report(path, &bytes).map_err(|e| {
            anyhow::anyhow!(
                "the state `{}` was saved; only the Code Quality report failed: {e:#}; the next waking tick writes it again",
                cfg.state.display()
            )
        })?;
        report.writes.push(WriteLog {
            kind: "codequality",
            target: path.display().to_string(),
            ok: true,
            detail: format!("{} bytes", bytes.len()),
        });
    }
    Ok(())
}

/// Publish the dashboard when its content (health line aside) changed;
/// why it failed, if it did.
fn publish(
    cfg: &TickConfig,
    state: &mut State,
    publisher: &mut dyn Publisher,
    report: &mut TickReport,
) -> Option<String> {
    let page = dashboard::render(state, cfg.web_url.as_deref(), cfg.now);
    let h = dashboard::hash(dashboard::without_health(&page));
    if state.llm.dashboard_hash.as_deref() == Some(h.as_str()) {
        return None;
    }
    // The page quotes reasons and errors from peers: redacted before it leaves.
    let (ok, detail) = match publisher.publish(&crate::redact::text(&page)) {
        Ok(detail) => {
            state.llm.dashboard_hash = Some(h);
            (true, detail)
        }
        Err(detail) => (false, detail),
    };
    let failed = (!ok).then(|| detail.clone());
    report.writes.push(WriteLog {
        kind: "dashboard",
        target: publisher.target(),
        ok,
        detail,
    });
    failed
}

//! An outage tick that learned nothing: the head lookup and the listing both
//! failed. Nothing in the state would change but its counters, so the state
//! is left byte for byte as it was (a job that uploads the state only when
//! it changed uploads nothing) and the tick is counted in the no-op journal,
//! folded in by the next save.

use anyhow::Result;

use super::config::TickConfig;
use super::early::Look;
use super::report::{TickReport, reported};
use crate::exit;
use crate::gate::outage;
use crate::source::Source;
use crate::state::State;
use crate::state::journal::Contents;
use crate::state::storage::Storage;

/// Journal the outage (not on a dry run) and report it; the files waiting
/// in the backlog wait for the source to answer again.
pub(super) fn unlearned(
    cfg: &TickConfig,
    look: &Look,
    storage: &mut dyn Storage,
    source: &dyn Source,
    (state, journal): (&State, &Contents),
    mut notes: Vec<String>,
) -> Result<TickReport> {
    let mut report = TickReport::new(
        exit::for_reason(look.verdict.reason),
        reported(&look.verdict),
        cfg.dry_run,
    );
    if !cfg.dry_run {
        super::early::record_start(cfg, storage)?;
        storage.outage_append(state.journal, cfg.now)?;
    }
    let so_far = outage::so_far(journal, state.outage, state.journal);
    report.outage = Some(outage::record(so_far, true, cfg.now));
    notes.push("nothing was learned: the state was left as it was".into());
    report.notes = notes;
    report.requests = source.requests();
    report.requests_by_kind = source.request_counts();
    report.reader = report.requests_by_kind.reader;
    report.slept_ms = source.waits_ms();
    Ok(report)
}

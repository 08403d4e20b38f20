//! Who decided: every decision names the advisor that made it, so that the
//! advisor can be off for a tick without changing what is remembered. Here:
//! the upgrade of states written before, and the header's summaries.

use super::config::TickConfig;
use crate::state::files::Figures;
use crate::state::{BY_LOCAL, Outcome, State};

/// Carry a state written before the advisor left the evidence version over
/// to the current version. A fingerprint under a legacy version of these
/// rules and this policy gets the current version, and a decision without a
/// maker is named: `local` for local policy's outcomes, the advisor that
/// legacy version implies for the others. Nothing is judged again and
/// nothing is billed; a fingerprint under any other version (other rules, or
/// another model than the configured one) is left to be judged again.
/// Returns a note when anything was carried over.
pub(super) fn upgrade(state: &mut State, cfg: &TickConfig) -> Option<String> {
    // Only a state last saved under a legacy version holds legacy
    // fingerprints: the wake that saves the current version carried them all.
    let last = state.wake.last_evidence.as_deref()?;
    if !cfg.legacy_evidence.iter().any(|l| l.evidence == last) {
        return None;
    }
    let current = format!("|ev:{}|", cfg.evidence);
    let legacy: Vec<(String, Option<&str>)> = cfg
        .legacy_evidence
        .iter()
        .filter(|l| l.evidence != cfg.evidence)
        .map(|l| (format!("|ev:{}|", l.evidence), l.by.as_deref()))
        .collect();
    let mut carried = 0u64;
    for record in state.files.values_mut() {
        let Some(fp) = record.fingerprint.as_mut() else {
            continue;
        };
        let Some((old, by)) = legacy.iter().find(|(old, _)| fp.contains(old.as_str())) else {
            continue;
        };
        *fp = fp.replacen(old.as_str(), &current, 1);
        carried += 1;
        if let Some(d) = record.decision.as_mut().filter(|d| d.by.is_none()) {
            d.by = match d.outcome {
                Outcome::LocalSkip | Outcome::NeedsReview => Some(BY_LOCAL.to_string()),
                _ => by.map(str::to_string),
            };
        }
    }
    (carried > 0).then(|| {
        format!(
            "carried {carried} fingerprint(s) over from the earlier evidence version, which included the advisor; nothing was judged again"
        )
    })
}

/// The header's summaries of who decided: the model's remembered decisions
/// per advisor (another advisor judges them again), and the hand-overs made
/// with the advisor off (offered to the advisor once it is on). Per bucket:
/// those this wake did not read answer from their summary.
pub(super) fn summarise(state: &mut State, figures: &Figures) {
    state.decided_by = figures.decided_by.clone();
    state.awaiting_advisor = figures.awaiting;
}

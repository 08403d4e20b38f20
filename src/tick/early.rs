//! The cheap stages that can end a tick before the state is loaded: lock,
//! admit, look (one head lookup and the verdict), and the no-op.

use anyhow::Result;

use super::config::TickConfig;
use super::report::{ReportedVerdict, TickReport, reported, short_id};
use crate::exit;
use crate::gate::admission;
use crate::gate::autonomy::{self, Admission, Candidate};
use crate::gate::wake::{self, Detail, Reason, Verdict, WakeInput};
use crate::source::{Scope, Source, SourceError};
use crate::state::storage::Storage;
use crate::state::{Header, State};

/// What the cheap stages learned: enough to decide whether to wake.
pub(super) struct Look {
    pub header: Header,
    /// This tick's scope, saved with the state.
    pub scope: Scope,
    /// The state belonged to another scope and `--rescope` moves it here:
    /// the tree is listed whole.
    pub rescoped: bool,
    /// False on the very first tick: there is no state to load.
    pub known_state: bool,
    /// The head of the watched path; `None` when the lookup failed.
    pub head: Option<String>,
    /// The branch tip the head was found at, when the source read it
    /// without a request and the head lookup answered.
    pub tip: Option<String>,
    pub verdict: Verdict,
    /// The autonomy admission's answer, when autonomy is on.
    pub admission: Option<Admission>,
}

/// lock: an exclusive, non-blocking lock. `Some` is the busy report. A dry
/// run writes nothing, so it needs no lock: saves are atomic renames and a
/// read always sees a whole document.
pub(super) fn lock(cfg: &TickConfig, storage: &mut dyn Storage) -> Result<Option<TickReport>> {
    if cfg.dry_run {
        return Ok(None);
    }
    let Err(path) = storage.try_lock()? else {
        return Ok(None);
    };
    let verdict = ReportedVerdict {
        wake: false,
        reason: "busy".into(),
        detail: Some(serde_json::json!({ "lock": path })),
    };
    let mut report = TickReport::new(exit::BUSY, verdict, false);
    report
        .notes
        .push(format!("another tick holds `{}`", path.display()));
    Ok(Some(report))
}

/// scope: a state belongs to one source, project, branch and path. A tick
/// of another scope refuses before anything is written, unless `--rescope`
/// moves the state (`Ok(true)`). A state without a scope adopts this one.
pub(super) fn scope(cfg: &TickConfig, header: Option<&Header>, current: &Scope) -> Result<bool> {
    let Some(saved) = header.and_then(|h| h.scope.as_ref()) else {
        return Ok(false);
    };
    if saved == current {
        return Ok(false);
    }
    if cfg.rescope {
        return Ok(true);
    }
    anyhow::bail!(
        "the state `{}` belongs to {saved}, not to this tick's {current} ({}); nothing was \
         written. For a second scope, give this tick its own --state; to move this state to \
         the new scope on purpose, run the tick once with --rescope (it lists everything again \
         and keeps the decisions of the files that still exist)",
        cfg.state.display(),
        saved.differences(current).join(", ")
    )
}

/// admit: a poke is admitted at most once per window, before any request.
/// A tick refused as busy never got here, so it cannot consume the window.
/// The admitted start is written later (`record_start`), once the tick is
/// past its configuration errors: a tick that writes nothing else must not
/// leave a `.start` behind either.
pub(super) fn admit(cfg: &TickConfig, storage: &mut dyn Storage) -> Result<Option<TickReport>> {
    if !cfg.trigger.is_triggered() {
        return Ok(None);
    }
    let last = storage.read_start()?;
    match admission::admit(cfg.trigger, last, cfg.min_interval, cfg.now) {
        admission::Admission::RateLimited { retry_after } => {
            let ms = retry_after.num_milliseconds();
            let secs = ms.div_euclid(1000) + i64::from(ms % 1000 != 0);
            let verdict = ReportedVerdict {
                wake: false,
                reason: "rate_limited".into(),
                detail: Some(serde_json::json!({
                    "trigger": cfg.trigger,
                    "last_start": last,
                    "retry_after_s": secs,
                })),
            };
            let mut report = TickReport::new(exit::RATE_LIMITED, verdict, cfg.dry_run);
            report.notes.push(format!(
                "a triggered tick within --min-interval of the last start; next in {secs} s"
            ));
            Ok(Some(report))
        }
        admission::Admission::Start => Ok(None),
    }
}

/// The admitted start of a triggered tick, recorded when the tick is about
/// to write its journal line or its state (never on a dry run).
pub(super) fn record_start(cfg: &TickConfig, storage: &mut dyn Storage) -> Result<()> {
    if cfg.trigger.is_triggered() && !cfg.dry_run {
        storage.write_start(cfg.now)?;
    }
    Ok(())
}

/// look: the header, the autonomy admission (from the header alone), ONE
/// head lookup, and the verdict.
pub(super) fn look(
    cfg: &TickConfig,
    header: Option<Header>,
    (scope, rescoped): (Scope, bool),
    source: &mut dyn Source,
) -> Result<Look> {
    let known_state = header.is_some();
    let header = header.unwrap_or_else(|| State::new().header());
    let admission = autonomy_admission(cfg, &header);
    let autonomy_input = admission.as_ref().map(|a| match a {
        Admission::Eligible { path, trigger } => Ok((path.as_str(), trigger.kind.as_str())),
        Admission::Refused(r) => Err(r.as_str()),
    });
    // A moved scope asks git: the remembered pair was found for the old one.
    let known = header.wake.tip.as_ref().filter(|_| !rescoped);
    let (head, tip) = source.head_at_tip(known);
    let head_err = head.as_ref().err().map(|e| e.to_string());
    let input = WakeInput {
        head: match &head {
            Ok(h) => Ok(h.as_str()),
            Err(_) => Err(head_err.as_deref().unwrap_or_default()),
        },
        evidence: &cfg.evidence,
        now: cfg.now,
        autonomy: autonomy_input,
        advisor: cfg.advisor.as_ref().map(|a| a.id.as_str()),
    };
    let mut verdict = wake::evaluate(&header, &input);
    if rescoped && !matches!(verdict.reason, Reason::FirstRun | Reason::ShaUnavailable) {
        verdict = Verdict {
            wake: true,
            reason: Reason::RepoChanged,
            detail: Some(Detail::Change {
                from: header.wake.last_head.clone().unwrap_or_default(),
                to: input.head.unwrap_or_default().to_string(),
            }),
        };
    }
    // Before anything is remembered, an unknown head is a setup problem, not
    // a hiccup: waking on it every tick would hide it behind exit codes.
    if let Err(SourceError::Config(e)) = &head {
        anyhow::bail!("{e} {}", super::not_saved(cfg));
    }
    if let (Reason::FirstRun, Err(e)) = (verdict.reason, &head) {
        anyhow::bail!(
            "cannot find the latest commit of the watched path: {e}; check --repo, --branch and --path {}",
            super::not_saved(cfg)
        );
    }
    Ok(Look {
        header,
        scope,
        rescoped,
        known_state,
        tip: tip.filter(|_| head.is_ok()),
        head: head.ok(),
        verdict,
        admission,
    })
}

/// The autonomy admission runs on every tick, from the header alone.
fn autonomy_admission(cfg: &TickConfig, header: &Header) -> Option<Admission> {
    if cfg.autonomy.mode != autonomy::Mode::Controlled || cfg.advisor.is_none() {
        return None;
    }
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
    Some(autonomy::admit(
        &header.autonomy,
        &cfg.autonomy,
        &candidates,
        held,
        cfg.now,
    ))
}

/// none: count the no-op in the journal; the state file is not touched.
pub(super) fn idle(
    cfg: &TickConfig,
    look: &Look,
    storage: &mut dyn Storage,
    source: &dyn Source,
) -> Result<TickReport> {
    let mut report = TickReport::new(exit::NONE, reported(&look.verdict), cfg.dry_run);
    report.head = look.head.clone();
    if !cfg.dry_run {
        let short = look.head.as_deref().map(short_id).unwrap_or("-");
        storage.journal_append(look.header.journal, cfg.now, short)?;
    }
    report.requests = source.requests();
    report.requests_by_kind = source.request_counts();
    report.reader = report.requests_by_kind.reader;
    Ok(report)
}

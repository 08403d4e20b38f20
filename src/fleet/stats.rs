//! `sentinel stats --state-dir DIR`: a fleet at a glance, read from its
//! ledger and each project's state: the projects by last outcome, the
//! day's spend by project, the held ones, and the budget its shard had.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tabled::builder::Builder;
use tabled::settings::Style;

use crate::tick::FleetBudget;

/// One project of the fleet as its state and the ledger say.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectStats {
    pub id: u64,
    /// `no_op` when its last tick found nothing, else its last wake's
    /// reason; `damaged` when its state cannot be read.
    pub outcome: String,
    pub spent_today: f64,
    /// Until when the provider is held for it (its own circuit or the
    /// fleet's), if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_until: Option<DateTime<Utc>>,
    /// Why the state cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetStats {
    pub projects: u64,
    pub by_outcome: BTreeMap<String, u64>,
    pub spent_today: f64,
    /// The budget the ledger was last written with; `None` before.
    pub budget: Option<FleetBudget>,
    /// Until when the fleet's circuit holds the provider for every project.
    pub held_until: Option<DateTime<Utc>>,
    pub held: u64,
    pub by_project: Vec<ProjectStats>,
}

/// The fleet under `dir`, read at `now`.
pub fn compute(dir: &Path, now: DateTime<Utc>) -> Result<FleetStats> {
    let book = super::ledger::load(dir, now)?;
    let fleet_hold = (book.circuit.as_ref())
        .filter(|c| crate::llm::protocol::is_open(c, now))
        .map(|c| c.until);
    let mut ids: Vec<u64> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("cannot read the fleet's state directory `{}`: {e}; give --state-dir the directory `sentinel tick --state-dir` wrote", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|id: &u64| super::state_path(dir, *id).is_file())
        .collect();
    ids.sort_unstable();
    let mut by_project: Vec<ProjectStats> = ids
        .iter()
        .map(|id| project(dir, *id, now, fleet_hold))
        .collect();
    for p in &mut by_project {
        // The ledger is the fleet's book of the day: it wins where it has one.
        if let Some(spent) = book.spent.get(&p.id) {
            p.spent_today = *spent;
        }
    }
    let mut by_outcome = BTreeMap::new();
    for p in &by_project {
        *by_outcome.entry(p.outcome.clone()).or_insert(0) += 1;
    }
    Ok(FleetStats {
        projects: by_project.len() as u64,
        by_outcome,
        spent_today: by_project.iter().map(|p| p.spent_today).sum(),
        budget: book.budget,
        held_until: fleet_hold,
        held: by_project.iter().filter(|p| p.held_until.is_some()).count() as u64,
        by_project,
    })
}

fn project(dir: &Path, id: u64, now: DateTime<Utc>, fleet: Option<DateTime<Utc>>) -> ProjectStats {
    let path = super::state_path(dir, id);
    let read = crate::state::store::load(&path).and_then(|s| {
        let contents = crate::state::journal::read(&path)?;
        Ok((s, contents))
    });
    let (state, contents) = match read {
        Ok((Some(s), c)) => (s, c),
        Ok((None, _)) | Err(_) => {
            let error = read.err().map(|e| crate::redact::text(&format!("{e:#}")));
            return ProjectStats {
                id,
                outcome: "damaged".into(),
                spent_today: 0.0,
                held_until: fleet,
                error,
            };
        }
    };
    let s = crate::report::stats::compute(&state, contents.unfolded(state.journal), now, 0.0);
    // A no-op after the last save is only in the journal.
    let outcome = match s.wake.unsaved_noops {
        0 => s
            .wake
            .last_wake_reason
            .clone()
            .unwrap_or_else(|| "-".into()),
        _ => "no_op".into(),
    };
    let own = s.llm.circuit.as_ref().filter(|c| c.open).map(|c| c.until);
    ProjectStats {
        id,
        outcome,
        spent_today: s.llm.cost_today_measured + s.llm.cost_today_estimated,
        held_until: own.max(fleet),
        error: None,
    }
}

fn usd(v: f64) -> String {
    format!("${v:.4}")
}

/// One table, at most `stats::TABLE_WIDTH` wide: a row per project that
/// spent today, is held or whose state is damaged; the others one row per
/// last outcome; then the fleet's row.
pub fn render(s: &FleetStats) -> String {
    let mut b = Builder::default();
    b.push_record(["project", "last outcome", "spent today", "held until"]);
    let notable =
        |p: &ProjectStats| p.spent_today > 0.0 || p.error.is_some() || p.held_until.is_some();
    let when = |t: &Option<DateTime<Utc>>| {
        t.map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string())
    };
    let mut quiet: BTreeMap<&str, u64> = BTreeMap::new();
    for p in &s.by_project {
        if notable(p) {
            b.push_record([
                format!("#{}", p.id),
                crate::report::escape::terminal(&p.outcome).into_owned(),
                usd(p.spent_today),
                when(&p.held_until),
            ]);
        } else {
            *quiet.entry(p.outcome.as_str()).or_insert(0) += 1;
        }
    }
    for (outcome, n) in quiet {
        b.push_record([
            format!("{n} other(s)"),
            crate::report::escape::terminal(outcome).into_owned(),
            usd(0.0),
            "-".into(),
        ]);
    }
    let budget = match &s.budget {
        Some(b) if b.shard.1 > 1 => format!(
            "{} of {} (shard {}/{} of {})",
            usd(s.spent_today),
            usd(b.share),
            b.shard.0,
            b.shard.1,
            usd(b.daily_budget)
        ),
        Some(b) => format!("{} of {}", usd(s.spent_today), usd(b.share)),
        None => usd(s.spent_today),
    };
    let by: Vec<String> = s
        .by_outcome
        .iter()
        .map(|(o, n)| format!("{} {n}", crate::report::escape::terminal(o)))
        .collect();
    b.push_record([
        format!("fleet: {}", s.projects),
        by.join(", "),
        budget,
        format!(
            "{} held{}",
            s.held,
            s.held_until.map_or(String::new(), |t| format!(
                ", fleet until {}",
                t.format("%Y-%m-%d %H:%M UTC")
            ))
        ),
    ]);
    let mut t = b.build();
    t.with(Style::rounded());
    t.with(
        tabled::settings::Width::wrap(crate::report::stats::TABLE_WIDTH)
            .keep_words(true)
            .priority(tabled::settings::peaker::PriorityMax::default()),
    );
    format!("{t}\n")
}

/// The fleet in the Prometheus text format, `sentinel_fleet_` names.
pub fn prometheus(s: &FleetStats) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP sentinel_fleet_{name} {help}");
        let _ = writeln!(out, "# TYPE sentinel_fleet_{name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "sentinel_fleet_{name}{labels} {v}");
        }
    };
    let label = |k: &str, v: &str| format!("{{{k}=\"{}\"}}", v.replace(['\\', '"', '\n'], "_"));
    metric(
        "projects",
        "gauge",
        "The fleet's projects with a state, by their last outcome.",
        s.by_outcome
            .iter()
            .map(|(o, n)| (label("outcome", o), *n as f64))
            .collect(),
    );
    metric(
        "spent_today_usd",
        "gauge",
        "What each project spent on the model today (UTC), in USD.",
        s.by_project
            .iter()
            .map(|p| (label("project", &p.id.to_string()), p.spent_today))
            .collect(),
    );
    metric(
        "budget_usd",
        "gauge",
        "This shard's share of the fleet's daily budget, in USD.",
        s.budget.iter().map(|b| (String::new(), b.share)).collect(),
    );
    metric(
        "held_projects",
        "gauge",
        "Projects for which the provider is held now.",
        vec![(String::new(), s.held as f64)],
    );
    out
}

/// `sentinel stats --state-dir DIR`, in the format asked.
pub fn run(args: &crate::cli::StatsArgs, dir: &Path) -> Result<u8> {
    let s = compute(dir, args.now.unwrap_or_else(Utc::now))?;
    let text = match (args.json, args.format) {
        (true, _) | (_, crate::cli::StatsFormat::Json) => {
            format!("{}\n", crate::redact::to_string(&s)?)
        }
        (_, crate::cli::StatsFormat::Prometheus) => prometheus(&s),
        (_, crate::cli::StatsFormat::Table) => render(&s),
    };
    crate::command::emit(text)?;
    Ok(0)
}

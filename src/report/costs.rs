//! `sentinel costs`: the bill beside sentinel's own count, as a table or JSON.

use std::collections::BTreeMap;

use chrono::NaiveDate;
use serde::Serialize;
use tabled::builder::Builder;
use tabled::settings::Style;

use crate::gate::costs::{Advisory, BilledDay, Calibration, DaySpend, days_between, usd};

/// Requests made to each Admin API endpoint (one per page).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pages {
    pub costs: usize,
    pub usage: usize,
}

/// One UTC day of the window with something on either side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DayRow {
    pub day: NaiveDate,
    pub billed: Option<BilledDay>,
    /// What sentinel counted that day; null when it kept no record of it.
    pub sentinel: Option<DaySpend>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostsReport {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub days: u32,
    pub project: Option<String>,
    pub daily_budget: f64,
    /// False when an endpoint was cut after its page limit.
    pub complete: bool,
    pub pages: Pages,
    /// The first day of sentinel's own history (older days: the budget only).
    pub history_since: Option<NaiveDate>,
    pub billed_usd: f64,
    pub billed_requests: u64,
    pub by_day: Vec<DayRow>,
    /// What this run found (also kept in the state, bounded).
    pub advisories: Vec<Advisory>,
    /// Measured costs per call stored by `--calibrate` in this run.
    pub calibrated: Vec<Calibration>,
    pub state_written: bool,
    pub notes: Vec<String>,
}

/// The rows of the window: days with a bill or a record of sentinel's.
pub fn rows(
    bill: &BTreeMap<NaiveDate, BilledDay>,
    ours: &BTreeMap<NaiveDate, DaySpend>,
    from: NaiveDate,
    to: NaiveDate,
) -> Vec<DayRow> {
    days_between(from, to)
        .filter(|d| bill.contains_key(d) || ours.contains_key(d))
        .map(|day| DayRow {
            day,
            billed: bill.get(&day).cloned(),
            sentinel: ours.get(&day).cloned(),
        })
        .collect()
}

/// The table and the lines `sentinel costs` prints.
pub fn render(r: &CostsReport) -> String {
    let mut out = format!(
        "sentinel costs: {} .. {} ({} UTC {}){}\n",
        r.from,
        r.to,
        r.days,
        if r.days == 1 { "day" } else { "days" },
        r.project
            .as_deref()
            .map(|p| format!(", project {p}"))
            .unwrap_or_default()
    );
    if r.billed_usd == 0.0 && r.billed_requests == 0 {
        out.push_str(&format!(
            "nothing billed from {} to {}: no cost and no completions request\n",
            r.from, r.to
        ));
    }
    if !r.by_day.is_empty() {
        out.push_str(&day_table(&r.by_day));
    }
    if r.advisories.is_empty() {
        out.push_str("no advisory\n");
    } else {
        for a in &r.advisories {
            out.push_str(&format!("{}: {}\n", a.kind, a.message));
        }
    }
    for c in &r.calibrated {
        out.push_str(&format!(
            "calibrated {}: {} per call ({} requests over {} {}); the budget counts it from the next tick\n",
            c.model,
            usd(c.per_call),
            c.requests,
            c.days,
            if c.days == 1 { "day" } else { "days" }
        ));
    }
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(if r.state_written {
        "state saved\n"
    } else {
        "state unchanged\n"
    });
    out
}

/// The days of the window side by side: the bill, then what sentinel
/// counted (its estimate for models without a price shown apart).
fn day_table(by_day: &[DayRow]) -> String {
    let mut b = Builder::default();
    b.push_record([
        "UTC day",
        "billed",
        "billed requests",
        "sentinel calls",
        "sentinel counted",
    ]);
    for row in by_day {
        let (billed, requests) = match &row.billed {
            Some(d) => (usd(d.usd), d.requests.to_string()),
            None => ("-".into(), "-".into()),
        };
        let (calls, counted) = match &row.sentinel {
            Some(s) if s.estimated > 0.0 => (
                s.calls.to_string(),
                format!("{} ({} estimated)", usd(s.cost()), usd(s.estimated)),
            ),
            Some(s) => (s.calls.to_string(), usd(s.cost())),
            None => ("-".into(), "-".into()),
        };
        b.push_record([row.day.to_string(), billed, requests, calls, counted]);
    }
    let mut t = b.build();
    t.with(Style::rounded());
    format!("{t}\n")
}

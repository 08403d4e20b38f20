//! What sentinel prints: the one-line tick verdict, the stats tables and `explain`.

pub mod codequality;
pub mod costs;
pub mod dashboard;
pub use sentinel_core::escape;
pub mod explain;
pub mod stats;

use tabled::builder::Builder;
use tabled::settings::Style;

use crate::state::Outcome;
use crate::tick::{TickReport, short_id};

/// The one line a tick prints on stderr, escaped for the terminal: paths,
/// notes and peers' errors can hold anything.
pub fn tick_line(r: &TickReport) -> String {
    escape::terminal(&verdict_line(r)).into_owned()
}

fn verdict_line(r: &TickReport) -> String {
    if let Some(line) = idle_line(r) {
        return line;
    }
    let what = wake_reason(r);
    let mut parts: Vec<String> = Outcome::ALL
        .iter()
        .filter_map(|o| {
            r.counts
                .get(o.as_str())
                .map(|n| format!("{n} {}", o.as_str()))
        })
        .collect();
    if parts.is_empty() {
        parts.push("no file to judge".into());
    }
    let n = r.files.len();
    let files = if n == 1 { "file" } else { "files" };
    let saved = if r.dry_run {
        "dry run, nothing written"
    } else if r.state_written {
        "state saved"
    } else {
        "state not saved"
    };
    let mut line = match &r.outage {
        // An outage must not read like an ordinary wake: it leads the line.
        Some(o) => format!(
            "sentinel: outage ({what}): {}; {n} {files} — {}; {saved}",
            outage_run(o),
            parts.join(", ")
        ),
        None => format!(
            "sentinel: woke ({what}): {n} {files} — {}; {saved}",
            parts.join(", ")
        ),
    };
    for note in &r.notes {
        line.push_str("; ");
        line.push_str(note);
    }
    line
}

/// `3 ticks in a row since <time> (7 in all)`.
fn outage_run(o: &crate::state::Outage) -> String {
    let ticks = if o.consecutive == 1 { "tick" } else { "ticks" };
    let since = o
        .since
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| "-".into());
    format!(
        "{} {ticks} in a row since {since} ({} in all)",
        o.consecutive, o.ticks
    )
}

/// The string `k` of the verdict's detail, or `""`.
fn detail_str(r: &TickReport, k: &str) -> String {
    r.verdict
        .detail
        .as_ref()
        .and_then(|d| d.get(k))
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string()
}

/// The line of a tick that did not wake: refused (busy, rate limited) or
/// with nothing to do. `None` when it woke.
fn idle_line(r: &TickReport) -> Option<String> {
    let detail = r.verdict.detail.as_ref();
    match r.verdict.reason.as_str() {
        "busy" => Some(format!(
            "sentinel: busy ({}); nothing started",
            r.notes.join("; ")
        )),
        "rate_limited" => {
            let secs = detail
                .and_then(|d| d.get("retry_after_s"))
                .and_then(|v| v.as_i64())
                .unwrap_or(0);
            Some(format!(
                "sentinel: rate_limited (a {} tick within --min-interval of the last start; next in {secs} s); nothing started",
                detail_str(r, "trigger")
            ))
        }
        "none" => {
            let head = r.head.as_deref().map(short_id).unwrap_or("-");
            let tail = if r.dry_run {
                "dry run, nothing written"
            } else {
                "nothing written"
            };
            Some(format!("sentinel: none (head {head} unchanged); {tail}"))
        }
        _ => None,
    }
}

/// Why a tick woke, with the detail that reason carries.
fn wake_reason(r: &TickReport) -> String {
    let detail = r.verdict.detail.as_ref();
    let field = |k: &str| detail_str(r, k);
    match r.verdict.reason.as_str() {
        "repo_changed" => format!(
            "repo_changed {}..{}",
            short_id(&field("from")),
            short_id(&field("to"))
        ),
        "sha_unavailable" => format!("sha_unavailable: {}", field("error")),
        "evidence_changed" => format!("evidence_changed {}..{}", field("from"), field("to")),
        "backlog" => backlog(detail),
        "first_run" => match &r.head {
            Some(h) => format!("first_run at {}", short_id(h)),
            None => "first_run".to_string(),
        },
        "opportunity_due" => format!("opportunity_due: review of {}", field("path")),
        "autonomy_due" => format!(
            "autonomy_due: {} reconsidered for {}",
            field("path"),
            field("trigger")
        ),
        other => other.to_string(),
    }
}

/// What a backlog wake is about: files the batch left over, waiting files
/// whose time came, or hand-overs for an advisor that is on again.
fn backlog(detail: Option<&serde_json::Value>) -> String {
    let number = |k: &str| {
        detail
            .and_then(|d| d.get(k))
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    };
    let mut what = Vec::new();
    if let Some(t) = detail
        .and_then(|d| d.get("retry_due"))
        .and_then(|v| v.as_str())
    {
        what.push(format!("retries due since {t}"));
    }
    if number("awaiting_advisor") > 0 {
        what.push(format!(
            "{} handed over while the advisor was off",
            number("awaiting_advisor")
        ));
    }
    match (number("pending"), what.is_empty()) {
        (n, true) => format!("backlog of {n}"),
        (0, false) => format!("backlog: {}", what.join(", ")),
        (n, false) => format!("backlog of {n}, {}", what.join(", ")),
    }
}

/// The before/after tables of `sentinel simulate`: one per scenario run.
pub fn simulation(
    day: Option<&crate::simulate::Day>,
    storm: Option<&crate::simulate::Storm>,
    quota: Option<&crate::simulate::Quota>,
) -> String {
    let mut out = String::new();
    if let Some(d) = day {
        out.push_str(&day_table(d));
    }
    if let Some(s) = storm {
        out.push_str(&storm_table(s));
    }
    if let Some(q) = quota {
        out.push_str(&quota_table(q));
    }
    out
}

/// `n` with a comma between groups of three digits: 3,600.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut o = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(c);
    }
    o
}

/// The table built in `b`, rounded, and a newline.
fn rounded(b: Builder) -> String {
    let mut t = b.build();
    t.with(Style::rounded());
    format!("{t}\n")
}

/// The ordinary day: each counter for naive, novelty gate only and sentinel.
fn day_table(d: &crate::simulate::Day) -> String {
    let mut b = Builder::default();
    b.push_record(["ordinary day", "naive", "novelty gate only", "sentinel"]);
    type Get = fn(&crate::simulate::Column) -> u64;
    let rows: [(&str, Get); 6] = [
        ("ticks", |c| c.ticks),
        ("ticks that did work (wakes)", |c| c.wakes),
        ("file reads", |c| c.file_reads),
        ("fresh evaluations", |c| c.fresh_evaluations),
        ("model calls", |c| c.model_calls),
        ("state writes", |c| c.state_writes),
    ];
    for (name, get) in rows {
        b.push_record([
            name.to_string(),
            thousands(get(&d.naive)),
            thousands(get(&d.novelty_only)),
            thousands(get(&d.sentinel)),
        ]);
    }
    rounded(b)
}

/// The webhook storm: cycles started, naive and sentinel, and the refusals.
fn storm_table(s: &crate::simulate::Storm) -> String {
    let mut b = Builder::default();
    b.push_record(["webhook storm".to_string(), "value".to_string()]);
    b.push_record(["pokes".to_string(), thousands(s.requests)]);
    b.push_record([
        "cycles started, naive".to_string(),
        thousands(s.naive_cycles),
    ]);
    b.push_record([
        "cycles started, sentinel".to_string(),
        thousands(s.cycles_started),
    ]);
    for (reason, n) in &s.refusals {
        b.push_record([format!("refused: {reason}"), thousands(*n)]);
    }
    rounded(b)
}

/// The quota wall: provider calls, naive and sentinel, and the circuit.
fn quota_table(q: &crate::simulate::Quota) -> String {
    let mut b = Builder::default();
    b.push_record(["quota wall (from 09:00)".to_string(), "value".to_string()]);
    b.push_record([
        "provider calls, naive (3 attempts per file per tick)".to_string(),
        thousands(q.naive_calls),
    ]);
    b.push_record([
        "provider calls, sentinel".to_string(),
        thousands(q.calls_after_nine),
    ]);
    b.push_record([
        "files held without a call".to_string(),
        thousands(q.held_files),
    ]);
    b.push_record([
        "circuit".to_string(),
        match (&q.circuit_class, &q.circuit_until) {
            (Some(c), Some(u)) => format!("{c} until {}", u.to_rfc3339()),
            _ => "closed".to_string(),
        },
    ]);
    rounded(b)
}

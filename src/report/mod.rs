//! What sentinel prints: the one-line tick verdict, the stats tables and `explain`.

pub mod codequality;
pub mod costs;
pub mod dashboard;
pub mod explain;
pub mod stats;

use crate::state::Outcome;
use crate::tick::{TickReport, short_id};

/// The one line a tick prints on stderr.
pub fn tick_line(r: &TickReport) -> String {
    let reason = r.verdict.reason.as_str();
    let detail = r.verdict.detail.as_ref();
    let field = |k: &str| {
        detail
            .and_then(|d| d.get(k))
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string()
    };
    match reason {
        "busy" => return format!("sentinel: busy ({}); nothing started", r.notes.join("; ")),
        "rate_limited" => {
            let secs = detail
                .and_then(|d| d.get("retry_after_s"))
                .and_then(|v| v.as_i64())
                .unwrap_or(0);
            return format!(
                "sentinel: rate_limited (a {} tick within --min-interval of the last start; next in {secs} s); nothing started",
                field("trigger")
            );
        }
        "none" => {
            let head = r.head.as_deref().map(short_id).unwrap_or("-");
            let tail = if r.dry_run {
                "dry run, nothing written"
            } else {
                "nothing written"
            };
            return format!("sentinel: none (head {head} unchanged); {tail}");
        }
        _ => {}
    }
    let what = match reason {
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
    };
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
    let mut line = format!(
        "sentinel: woke ({what}): {n} {files} — {}; {saved}",
        parts.join(", ")
    );
    for note in &r.notes {
        line.push_str("; ");
        line.push_str(note);
    }
    line
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

/// The before/after tables of `sentinel simulate`.
pub fn simulation(
    day: Option<&crate::simulate::Day>,
    storm: Option<&crate::simulate::Storm>,
    quota: Option<&crate::simulate::Quota>,
) -> String {
    use tabled::builder::Builder;
    use tabled::settings::Style;
    let mut out = String::new();
    let num = |n: u64| {
        let s = n.to_string();
        let mut o = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                o.push(',');
            }
            o.push(c);
        }
        o
    };
    if let Some(d) = day {
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
                num(get(&d.naive)),
                num(get(&d.novelty_only)),
                num(get(&d.sentinel)),
            ]);
        }
        let mut t = b.build();
        t.with(Style::rounded());
        out.push_str(&format!("{t}\n"));
    }
    if let Some(s) = storm {
        let mut b = Builder::default();
        b.push_record(["webhook storm".to_string(), "value".to_string()]);
        b.push_record(["pokes".to_string(), num(s.requests)]);
        b.push_record(["cycles started, naive".to_string(), num(s.naive_cycles)]);
        b.push_record([
            "cycles started, sentinel".to_string(),
            num(s.cycles_started),
        ]);
        for (reason, n) in &s.refusals {
            b.push_record([format!("refused: {reason}"), num(*n)]);
        }
        let mut t = b.build();
        t.with(Style::rounded());
        out.push_str(&format!("{t}\n"));
    }
    if let Some(q) = quota {
        let mut b = Builder::default();
        b.push_record(["quota wall (from 09:00)".to_string(), "value".to_string()]);
        b.push_record([
            "provider calls, naive (3 attempts per file per tick)".to_string(),
            num(q.naive_calls),
        ]);
        b.push_record([
            "provider calls, sentinel".to_string(),
            num(q.calls_after_nine),
        ]);
        b.push_record(["files held without a call".to_string(), num(q.held_files)]);
        b.push_record([
            "circuit".to_string(),
            match (&q.circuit_class, &q.circuit_until) {
                (Some(c), Some(u)) => format!("{c} until {}", u.to_rfc3339()),
                _ => "closed".to_string(),
            },
        ]);
        let mut t = b.build();
        t.with(Style::rounded());
        out.push_str(&format!("{t}\n"));
    }
    out
}

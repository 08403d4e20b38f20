//! What sentinel prints: the one-line tick verdict, the stats tables and `explain`.

pub mod codequality;
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
        "backlog" => format!(
            "backlog of {}",
            detail
                .and_then(|d| d.get("pending"))
                .map_or(0, |v| v.as_u64().unwrap_or(0))
        ),
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

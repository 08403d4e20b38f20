//! The dashboard: one Markdown page of the open proposals and a health line,
//! kept in one GitLab issue (or a file), rewritten only when it changes.

use std::fmt::Write;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::escape;
use crate::llm::client::Severity;
use crate::state::State;

/// The label that finds the dashboard issue again.
pub const LABEL: &str = "sentinel-dashboard";
pub const TITLE: &str = "sentinel dashboard";

fn worst(findings: &[crate::llm::client::Finding]) -> &'static str {
    let rank = |s: &Severity| match s {
        Severity::Info => 0,
        Severity::Minor => 1,
        Severity::Major => 2,
        Severity::Critical => 3,
        Severity::Blocker => 4,
    };
    match findings.iter().map(|f| rank(&f.severity)).max() {
        Some(4) => "blocker",
        Some(3) => "critical",
        Some(2) => "major",
        Some(1) => "minor",
        Some(_) => "info",
        None => "-",
    }
}

/// The page. `web_url` (the project's web address, e.g. `CI_PROJECT_URL`)
/// turns findings into line links at the judged commit. The text depends only
/// on the state, never on the time of rendering, so an unchanged state gives
/// an unchanged page and no edit.
pub fn render(state: &State, web_url: Option<&str>, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "This issue is kept by sentinel. It lists the changes the model proposes (EVOLVE) and is rewritten when they change.\n"
    );
    let _ = writeln!(out, "**Health:** {}.\n", health(state, now));
    // Only the buckets that hold a stuck file are read.
    state.files.load_where(|s| s.stuck > 0);
    let stuck: Vec<&str> = state
        .files
        .loaded()
        .filter(|(_, r)| r.stuck)
        .map(|(p, _)| p.as_str())
        .collect();
    if !stuck.is_empty() {
        let _ = writeln!(
            out,
            "**Stuck** (an agent rewrote them more often than `--max-rewrites` allows; `sentinel reset PATH` hands them over again): {}.\n",
            stuck
                .iter()
                .map(|p| escape::code(p))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if state.llm.proposals.is_empty() {
        let _ = writeln!(out, "No open proposals.");
        return out;
    }
    let head = state.wake.last_head.as_deref();
    let _ = writeln!(out, "| file | severity | findings | since |");
    let _ = writeln!(out, "|---|---|---|---|");
    let (mut files_left, mut findings_left) = (0usize, 0usize);
    for (path, p) in &state.llm.proposals {
        let row = format!(
            "| {} | {} | {} | {} |\n",
            escape::code(path),
            worst(&p.findings),
            findings_cell(path, p, web_url, head),
            p.ts.date_naive()
        );
        if files_left > 0 || out.len() + row.len() > MAX_PAGE_BYTES - LEFT_OUT_RESERVE {
            files_left += 1;
            findings_left += p.findings.len().max(1);
            continue;
        }
        out.push_str(&row);
    }
    if files_left > 0 {
        let _ = writeln!(
            out,
            "\n{findings_left} finding(s) of {files_left} more file(s) are left out to keep this page under {MAX_PAGE_BYTES} bytes (GitLab's limit for an issue description is 1,048,576 characters); the state lists every open proposal."
        );
    }
    out
}

/// The most bytes of the page: under GitLab's limit of 1,048,576 characters
/// for an issue description (a character is at least one byte).
pub const MAX_PAGE_BYTES: usize = 1_000_000;
/// Room kept for the line that says what was left out.
const LEFT_OUT_RESERVE: usize = 1_000;

/// The health line: the last wake, the no-op rate, today's calls and cost
/// (zero once the budget's day is past) and the circuit.
fn health(state: &State, now: DateTime<Utc>) -> String {
    let w = &state.wake;
    let b = &state.llm.budget;
    let today = now.date_naive();
    let (calls, cost) = if b.day == Some(today) {
        (b.calls_today, b.measured_today + b.estimated_today)
    } else {
        (0, 0.0)
    };
    let noop_rate = if w.ticks > 0 {
        format!("{:.1}%", w.noops as f64 / w.ticks as f64 * 100.0)
    } else {
        "-".into()
    };
    let circuit = match &state.llm.circuit {
        Some(c) if crate::llm::protocol::is_open(c, now) => {
            format!("open ({}) until {}", c.class.as_str(), c.until.to_rfc3339())
        }
        _ => "closed".into(),
    };
    format!(
        "last wake {} at {}; no-op rate {noop_rate}; model calls today {calls}, cost today ${cost:.4}; circuit {circuit}",
        w.last_wake_reason.as_deref().unwrap_or("-"),
        w.last_wake_ts.map_or("-".to_string(), |t| t.to_rfc3339()),
    )
}

/// A proposal's findings for its table cell, one per line, each linked to
/// its line at `head` when the project's address is known; the reason when
/// there is no finding.
fn findings_cell(
    path: &str,
    p: &crate::state::Proposal,
    web_url: Option<&str>,
    head: Option<&str>,
) -> String {
    if p.findings.is_empty() {
        return escape::markdown(&p.reason);
    }
    p.findings
        .iter()
        .map(|f| {
            let line = f.line.max(1);
            let at = match (web_url, head) {
                (Some(url), Some(sha)) => format!(
                    "[L{line}]({}/-/blob/{}/{}#L{line})",
                    url.trim_end_matches('/'),
                    escape::url_path(sha),
                    escape::url_path(path)
                ),
                _ => format!("L{line}"),
            };
            format!(
                "{at} {}: {}",
                severity(f.severity),
                escape::markdown(&f.message)
            )
        })
        .collect::<Vec<_>>()
        .join("<br>")
}

fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Minor => "minor",
        Severity::Major => "major",
        Severity::Critical => "critical",
        Severity::Blocker => "blocker",
    }
}

/// The page without its health line: a change of health alone (another
/// wake, another call) does not edit the issue; the proposals do.
pub fn without_health(page: &str) -> &str {
    match page.find("\n\n**Health:**") {
        Some(start) => match page[start + 2..].find("\n\n") {
            Some(end) => &page[start + 2 + end..],
            None => "",
        },
        None => page,
    }
}

/// A short hash of the page: an edit happens only when it differs.
pub fn hash(page: &str) -> String {
    hex::encode(&Sha256::digest(page.as_bytes())[..8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::client::Finding;
    use crate::state::Proposal;

    fn now() -> DateTime<Utc> {
        "2026-06-16T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_quiet_state_renders_the_same_page_at_any_time() {
        let state = State::new();
        let a = render(&state, None, now());
        let b = render(&state, None, now() + chrono::Duration::hours(5));
        assert_eq!(a, b);
        assert!(a.contains("No open proposals."));
    }

    #[test]
    fn proposals_list_file_severity_findings_with_line_links() {
        let mut state = State::new();
        state.wake.last_head = Some("abc123".into());
        state.llm.proposals.insert(
            "src/auth.js".into(),
            Proposal {
                fingerprint: "fp".into(),
                reason: "unsafe compare".into(),
                findings: vec![
                    Finding {
                        line: 3,
                        severity: Severity::Minor,
                        message: "a | b".into(),
                    },
                    Finding {
                        line: 9,
                        severity: Severity::Critical,
                        message: "constant time".into(),
                    },
                ],
                ts: now(),
                stale: false,
                patch_commit: None,
                patch_pending: None,
            },
        );
        let page = render(&state, Some("https://gitlab.example.com/g/p/"), now());
        assert!(page.contains("| `src/auth.js` | critical |"), "{page}");
        assert!(page.contains(
            "[L9](https://gitlab.example.com/g/p/-/blob/abc123/src/auth.js#L9) critical: constant time"
        ));
        assert!(page.contains("a \\| b"));
        assert_ne!(hash(&page), hash(&render(&State::new(), None, now())));
    }
}

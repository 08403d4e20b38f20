//! `sentinel explain FILE`: why did this file miss (or hit) the cache?

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::gate::novelty;
use crate::state::FileRecord;
use crate::tick::Current;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartDiff {
    pub part: &'static str,
    pub remembered: String,
    pub current: Option<String>,
    pub differs: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub path: String,
    pub remembered_fingerprint: Option<String>,
    pub current_fingerprint: Option<String>,
    pub parts: Vec<PartDiff>,
    pub last_decision: Option<crate::state::Decision>,
    pub evaluations: u64,
    pub reuses: u64,
    pub estimated_tokens_saved: u64,
    pub deps: Vec<String>,
    pub unresolved_imports: Vec<String>,
    /// One sentence: would the next look reuse the decision, and if not why.
    pub verdict: String,
    pub error: Option<String>,
    /// The rewrite limit as it stands for this file.
    pub rewrites: Rewrites,
    /// How the provider is held, when it is: the file waits for it too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// How often an agent (or a patch) rewrote the file, against the limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rewrites {
    /// Rewrites in the window ending now.
    pub in_window: usize,
    pub window_days: i64,
    /// `--max-rewrites` (0: no limit).
    pub max: u32,
    /// Until when the file is stuck (not handed over), if it is.
    pub stuck_until: Option<DateTime<Utc>>,
}

/// The limits the look applies: `--max-rewrites` and the time of the look.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_rewrites: u32,
    pub now: DateTime<Utc>,
}

fn rewrites_of(record: Option<&FileRecord>, limits: Limits) -> Rewrites {
    use crate::gate::rewrites;
    let (max, now) = (limits.max_rewrites, limits.now);
    Rewrites {
        in_window: record.map_or(0, |r| rewrites::in_window(r, now)),
        window_days: rewrites::WINDOW.num_days(),
        max,
        stuck_until: record.and_then(|r| rewrites::stuck_until(r, max, now)),
    }
}

/// Compare the remembered fingerprint with the current one, part by part.
/// `advisor` is who would judge at the next look (`None`: the advisor is off).
pub fn explain(
    path: &str,
    record: Option<&FileRecord>,
    current: &Current,
    advisor: Option<&str>,
    limits: Limits,
) -> Explanation {
    let rewrites = rewrites_of(record, limits);
    let remembered = record.and_then(|r| r.fingerprint.clone());
    let now_parts = current.fingerprint.as_deref().map(novelty::split);
    let parts: Vec<PartDiff> = match &remembered {
        Some(fp) => novelty::split(fp)
            .into_iter()
            .enumerate()
            .map(|(i, (part, value))| {
                let cur = now_parts.as_ref().map(|p| p[i].1.clone());
                PartDiff {
                    part,
                    differs: cur.as_ref().is_some_and(|c| *c != value),
                    remembered: value,
                    current: cur,
                }
            })
            .collect(),
        None => Vec::new(),
    };
    let decision = record.and_then(|r| r.decision.clone());
    let differing: Vec<&str> = parts.iter().filter(|p| p.differs).map(|p| p.part).collect();
    let by_advisor = decision
        .as_ref()
        .and_then(|d| stands_not(d, record, advisor));
    let verdict = match (&remembered, &current.fingerprint, &decision) {
        (None, _, _) => "first-seen: no decision is remembered for this file".to_string(),
        (_, None, _) => "the current fingerprint could not be computed (see error)".to_string(),
        (_, Some(cur), _) if cur.ends_with("|deps:unknown") => format!(
            "dependencies-unknown: imports that do not resolve ({}) make the file novel on every look",
            current.unresolved.join(", ")
        ),
        (Some(_), Some(_), _) if !differing.is_empty() => {
            format!("changed: {}", differ(&differing))
        }
        _ if by_advisor.is_some() => by_advisor.unwrap_or_default(),
        (Some(_), Some(_), Some(d)) if d.outcome == crate::state::Outcome::Stuck => {
            stuck_verdict(path, &rewrites)
        }
        (Some(_), Some(_), Some(d)) if !d.outcome.is_reusable() => format!(
            "prev-not-reusable: the last outcome `{}` is never replayed",
            d.outcome.as_str()
        ),
        _ => "unchanged: the next look reuses the remembered decision without a read".to_string(),
    };
    Explanation {
        path: path.to_string(),
        remembered_fingerprint: remembered,
        current_fingerprint: current.fingerprint.clone(),
        parts,
        last_decision: decision,
        evaluations: record.map_or(0, |r| r.evaluations),
        reuses: record.map_or(0, |r| r.reuses),
        estimated_tokens_saved: record.map_or(0, |r| r.tokens_saved),
        deps: record.map(|r| r.deps.clone()).unwrap_or_default(),
        unresolved_imports: current.unresolved.clone(),
        verdict,
        error: current.error.clone(),
        rewrites,
        provider: None,
    }
}

/// A stuck file: how often it was rewritten, and when it is handed over
/// again (the mark expires), or that it already is.
fn stuck_verdict(path: &str, r: &Rewrites) -> String {
    let counted = format!(
        "rewritten {} time(s) in {} days (--max-rewrites {})",
        r.in_window, r.window_days, r.max
    );
    match r.stuck_until {
        Some(until) => format!(
            "stuck: {counted}; handed over again after {} or at the next tick after `sentinel reset {path}`",
            until.to_rfc3339()
        ),
        None => format!("stuck mark expired: {counted}; the next look hands it over"),
    }
}

/// Why an unchanged fingerprint is still looked at again, or still not,
/// because of who decided: a given-up file, a hand-over or another model's
/// decision meeting an advisor, an EVOLVE kept while the advisor is off.
fn stands_not(
    d: &crate::state::Decision,
    record: Option<&FileRecord>,
    advisor: Option<&str>,
) -> Option<String> {
    use crate::state::Outcome;
    if record
        .and_then(|r| r.retry.as_ref())
        .is_some_and(|r| r.given_up())
    {
        return Some(
            "given-up: failed 5 times at this fingerprint; not asked again until the file changes or `sentinel reset PATH`"
                .to_string(),
        );
    }
    match (advisor, d.outcome) {
        (Some(a), Outcome::NeedsReview) => Some(format!(
            "advisor-changed: handed over while the advisor was off; the next look asks {a}"
        )),
        (Some(a), Outcome::LlmSkip | Outcome::Evolve) => d
            .by
            .as_deref()
            .filter(|b| *b != a)
            .map(|b| format!("advisor-changed: decided by {b}; the next look asks {a} again")),
        (None, Outcome::Evolve) => Some(
            "unchanged: the EVOLVE stands while the advisor is off; it is asked again once the advisor is on"
                .to_string(),
        ),
        _ => None,
    }
}

/// `content differs`, `dependencies differ`, `content and risk differ`,
/// `a, b and c differ`: the verb agrees with its subject.
fn differ(parts: &[&str]) -> String {
    match parts {
        ["dependencies"] => "dependencies differ".into(),
        [one] => format!("{one} differs"),
        [rest @ .., last] => format!("{} and {last} differ", rest.join(", ")),
        [] => String::new(),
    }
}

/// Plain-text form of an explanation.
pub fn render(e: &Explanation) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let t = |s: &str| super::escape::terminal(s).into_owned();
    let _ = writeln!(out, "file: {}", t(&e.path));
    let _ = writeln!(out, "verdict: {}", t(&e.verdict));
    if let Some(err) = &e.error {
        let _ = writeln!(out, "error: {}", t(err));
    }
    let _ = writeln!(
        out,
        "remembered: {}\ncurrent:    {}",
        t(e.remembered_fingerprint.as_deref().unwrap_or("-")),
        t(e.current_fingerprint.as_deref().unwrap_or("-"))
    );
    if !e.parts.is_empty() {
        let mut b = tabled::builder::Builder::default();
        b.push_record(["part", "remembered", "current", "differs"]);
        for p in &e.parts {
            b.push_record([
                p.part.to_string(),
                t(&p.remembered),
                t(p.current.as_deref().unwrap_or("-")),
                if p.differs { "yes" } else { "no" }.to_string(),
            ]);
        }
        let mut t = b.build();
        t.with(tabled::settings::Style::rounded());
        let _ = writeln!(out, "{t}");
    }
    match &e.last_decision {
        Some(d) => {
            let _ = writeln!(
                out,
                "last decision: {} ({}) by {} at {}",
                d.outcome.as_str(),
                t(&d.reason),
                t(d.by.as_deref().unwrap_or("-")),
                super::stats::secs(&d.ts)
            );
            if let Some(answered) = &d.answered_by {
                let _ = writeln!(
                    out,
                    "answered by: {} (the proxy's fallback for {})",
                    t(answered),
                    t(d.by.as_deref().unwrap_or("-"))
                );
            }
        }
        None => {
            let _ = writeln!(out, "last decision: -");
        }
    }
    let _ = writeln!(
        out,
        "evaluations: {}, reuses since this fingerprint: {}, estimated tokens saved (estimate): {}",
        e.evaluations, e.reuses, e.estimated_tokens_saved
    );
    if !e.deps.is_empty() {
        let _ = writeln!(out, "local dependencies: {}", t(&e.deps.join(", ")));
    }
    let _ = writeln!(out, "{}", rewrites_line(&e.rewrites));
    if let Some(p) = &e.provider {
        let _ = writeln!(out, "provider: {}", t(p));
    }
    out
}

/// `rewrites: 3 in 7 days (--max-rewrites 3), stuck until ...`.
fn rewrites_line(r: &Rewrites) -> String {
    let until = r.stuck_until.map_or("not stuck".to_string(), |u| {
        format!(
            "stuck until {}",
            u.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    });
    format!(
        "rewrites: {} in {} days (--max-rewrites {}), {until}",
        r.in_window, r.window_days, r.max
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_agrees_with_the_parts_that_differ() {
        assert_eq!(differ(&["content"]), "content differs");
        assert_eq!(differ(&["dependencies"]), "dependencies differ");
        assert_eq!(differ(&["content", "risk"]), "content and risk differ");
        assert_eq!(differ(&["a", "b", "c"]), "a, b and c differ");
    }
}

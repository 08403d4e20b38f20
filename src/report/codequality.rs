//! The GitLab Code Quality report of the open EVOLVE proposals.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::llm::client::Severity;
use crate::state::Proposal;

#[derive(Debug, Serialize)]
struct Issue<'a> {
    /// The model's words: no control, bidi or invisible character raw.
    description: std::borrow::Cow<'a, str>,
    check_name: String,
    fingerprint: String,
    severity: &'static str,
    location: Location<'a>,
}

#[derive(Debug, Serialize)]
struct Location<'a> {
    path: &'a str,
    lines: Lines,
}

#[derive(Debug, Serialize)]
struct Lines {
    begin: u64,
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

/// A fingerprint that stays the same across ticks for the same finding, so
/// the merge-request widget shows one entry, not one per tick.
fn fingerprint(path: &str, line: u64, message: &str) -> String {
    let mut h = Sha256::new();
    for part in [
        path.as_bytes(),
        line.to_string().as_bytes(),
        message.as_bytes(),
    ] {
        h.update(part);
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..16])
}

/// What a stuck file says in the report.
const STUCK: &str = "sentinel: an agent rewrote this file more often than --max-rewrites allows; it is not handed over until `sentinel reset PATH`";

/// One JSON array, no BOM; an empty array when nothing is open. A proposal
/// without findings is reported once, on its first line, with its reason;
/// a file stuck after too many rewrites once, on its first line.
pub fn render(proposals: &BTreeMap<String, Proposal>) -> anyhow::Result<Vec<u8>> {
    render_with(proposals, &[])
}

/// `render`, with the files an agent rewrote too often.
pub fn render_with(
    proposals: &BTreeMap<String, Proposal>,
    stuck: &[String],
) -> anyhow::Result<Vec<u8>> {
    let mut issues = Vec::new();
    for path in stuck {
        issues.push(Issue {
            description: STUCK.into(),
            check_name: "sentinel/stuck".into(),
            fingerprint: fingerprint(path, 1, STUCK),
            severity: "major",
            location: Location {
                path,
                lines: Lines { begin: 1 },
            },
        });
    }
    for (path, p) in proposals {
        if p.findings.is_empty() {
            issues.push(Issue {
                description: crate::report::escape::terminal(&p.reason),
                check_name: "sentinel/evolve".into(),
                fingerprint: fingerprint(path, 1, &p.reason),
                severity: "minor",
                location: Location {
                    path,
                    lines: Lines { begin: 1 },
                },
            });
        }
        for f in &p.findings {
            let line = f.line.max(1);
            issues.push(Issue {
                description: crate::report::escape::terminal(&f.message),
                check_name: format!("sentinel/{}", severity(f.severity)),
                fingerprint: fingerprint(path, line, &f.message),
                severity: severity(f.severity),
                location: Location {
                    path,
                    lines: Lines { begin: line },
                },
            });
        }
    }
    let left_out = keep_within(&mut issues, MAX_REPORT_BYTES - LEFT_OUT_RESERVE)?;
    let note;
    if left_out > 0 {
        note = format!(
            "sentinel: {left_out} more finding(s) were left out to keep this report under {MAX_REPORT_BYTES} bytes; the state lists every open proposal"
        );
        issues.push(Issue {
            description: note.as_str().into(),
            check_name: "sentinel/left-out".into(),
            fingerprint: fingerprint("", 1, "sentinel/left-out"),
            severity: "info",
            location: Location {
                path: issues.last().map_or("", |i| i.location.path),
                lines: Lines { begin: 1 },
            },
        });
    }
    // Messages come from the model: redacted on the way out; a path's
    // invisible characters are written as `\u` escapes, the same path.
    let text = crate::redact::to_string_pretty(&issues)?;
    let mut out = crate::report::escape::json(&text).into_owned().into_bytes();
    out.push(b'\n');
    Ok(out)
}

/// The most bytes the report is: GitLab parses the whole artifact on every
/// pipeline, and sentinel rewrites it on every wake that changes it.
pub const MAX_REPORT_BYTES: usize = 4 << 20;
/// Room kept for the entry that says how many were left out.
const LEFT_OUT_RESERVE: usize = 4 << 10;

/// Drop the issues past the first ones whose pretty JSON fits in `budget`
/// bytes; the number dropped. Each issue is measured as it sits in the
/// array: its own lines, indented two more spaces, and a `,\n`.
fn keep_within(issues: &mut Vec<Issue<'_>>, budget: usize) -> anyhow::Result<usize> {
    let mut used = 4; // "[\n", "]\n"
    for (i, issue) in issues.iter().enumerate() {
        let own = serde_json::to_vec_pretty(issue)?;
        let lines = own.iter().filter(|b| **b == b'\n').count() + 1;
        used += own.len() + 2 * lines + 2;
        if used > budget {
            let left_out = issues.len() - i;
            issues.truncate(i);
            return Ok(left_out);
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::client::Finding;

    fn proposal(findings: Vec<Finding>) -> Proposal {
        Proposal {
            fingerprint: "fp".into(),
            reason: "unchecked input".into(),
            findings,
            ts: "2026-06-16T00:00:00Z".parse().unwrap(),
            stale: false,
            patch_commit: None,
            patch_pending: None,
        }
    }

    #[test]
    fn every_issue_has_the_required_fields_and_a_stable_fingerprint() {
        let mut open = BTreeMap::new();
        open.insert(
            "src/auth.js".to_string(),
            proposal(vec![Finding {
                line: 42,
                severity: Severity::Critical,
                message: "token compared with ==".into(),
            }]),
        );
        open.insert("src/b.js".to_string(), proposal(vec![]));
        let a = render(&open).unwrap();
        assert_ne!(&a[..3], b"\xEF\xBB\xBF", "no BOM");
        let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
        let issues = v.as_array().unwrap();
        assert_eq!(issues.len(), 2);
        for i in issues {
            for key in ["description", "check_name", "fingerprint", "severity"] {
                assert!(i[key].is_string(), "{key} in {i}");
            }
            assert!(i["location"]["path"].is_string());
            assert!(i["location"]["lines"]["begin"].as_u64().unwrap() >= 1);
        }
        assert_eq!(issues[0]["severity"], "critical");
        assert_eq!(issues[0]["location"]["lines"]["begin"], 42);
        assert_eq!(render(&open).unwrap(), a, "same findings, same bytes");
    }

    #[test]
    fn bidi_and_separator_controls_never_reach_the_report_raw() {
        let mut open = BTreeMap::new();
        open.insert(
            "src/a\u{202e}b.js".to_string(),
            proposal(vec![Finding {
                line: 1,
                severity: Severity::Major,
                message: "ok\u{202e}gnp.exe\u{2028}x\u{200b}".into(),
            }]),
        );
        let report = render(&open).unwrap();
        let text = String::from_utf8(report.clone()).unwrap();
        for c in ['\u{202e}', '\u{2028}', '\u{200b}'] {
            assert!(!text.contains(c), "{c:?} raw in {text}");
        }
        let v: serde_json::Value = serde_json::from_slice(&report).unwrap();
        assert_eq!(v[0]["description"], "ok\\u{202e}gnp.exe\\u{2028}x\\u{200b}");
        assert_eq!(
            v[0]["location"]["path"], "src/a\u{202e}b.js",
            "the same path"
        );
    }

    #[test]
    fn no_open_proposal_is_an_empty_array() {
        assert_eq!(render(&BTreeMap::new()).unwrap(), b"[]\n");
    }
}

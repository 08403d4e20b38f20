//! The bounds on what a model's answer may leave in the state, the decision
//! journal and the reports: a peer can send any number of findings, of any
//! length, at any line, and none of that may grow what sentinel rewrites on
//! every wake.

use super::client::{Answer, Finding};

/// Findings kept per answer; the rest are counted and left out.
pub const MAX_FINDINGS: usize = 50;
/// Characters kept of a finding's message.
pub const MAX_MESSAGE_CHARS: usize = 1_000;
/// Characters kept of an answer's reason.
pub const MAX_REASON_CHARS: usize = 2_000;

/// Characters kept of a name a peer gives (a model, a model group).
pub const MAX_NAME_CHARS: usize = 120;

/// A name a peer gives, fit for a line and the state: control characters
/// dropped, at most `MAX_NAME_CHARS` characters kept.
pub fn short(name: &str) -> String {
    let clean: String = name.chars().filter(|c| !c.is_control()).collect();
    cap(&clean, MAX_NAME_CHARS)
}

/// `text` cut to at most `max` characters, on a character boundary, with an
/// ellipsis in place of what was cut.
pub fn cap(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some(_) => {
            let end = text
                .char_indices()
                .nth(max.saturating_sub(1))
                .map_or(0, |(i, _)| i);
            format!("{}…", &text[..end])
        }
    }
}

/// Bound an answer in place: at most `MAX_FINDINGS` findings, each message
/// and the reason capped. Returns how many findings were left out.
pub fn bound(answer: &mut Answer) -> usize {
    let sent = answer.findings.len();
    answer.findings.truncate(MAX_FINDINGS);
    for f in &mut answer.findings {
        if f.message.chars().nth(MAX_MESSAGE_CHARS).is_some() {
            f.message = cap(&f.message, MAX_MESSAGE_CHARS);
        }
    }
    if answer.reason.chars().nth(MAX_REASON_CHARS).is_some() {
        answer.reason = cap(&answer.reason, MAX_REASON_CHARS);
    }
    sent - answer.findings.len()
}

/// The lines of `bytes` as an editor counts them: a last line without a
/// newline counts, and an empty file has one (empty) line.
pub fn line_count(bytes: &[u8]) -> u64 {
    let newlines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
    if bytes.last().is_none_or(|b| *b != b'\n') {
        newlines + 1
    } else {
        newlines.max(1)
    }
}

/// Put every finding within the file's `lines`: a line 0 or past the end
/// (a model's guess, or `u64::MAX`) becomes line 1, where a finding about
/// the whole file is reported. Returns how many were moved.
pub fn within(findings: &mut [Finding], lines: u64) -> usize {
    let mut moved = 0;
    for f in findings
        .iter_mut()
        .filter(|f| f.line == 0 || f.line > lines)
    {
        f.line = 1;
        moved += 1;
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Action, Severity};

    fn finding(line: u64, message: &str) -> Finding {
        Finding {
            line,
            severity: Severity::Minor,
            message: message.into(),
        }
    }

    #[test]
    fn a_capped_text_is_cut_on_a_character_boundary_with_an_ellipsis() {
        assert_eq!(cap("abc", 3), "abc");
        assert_eq!(cap("abcd", 3), "ab…");
        let cut = cap(&"é".repeat(10), 4);
        assert_eq!(cut, "ééé…");
        assert_eq!(cut.chars().count(), 4);
    }

    #[test]
    fn an_answer_keeps_50_findings_of_at_most_1000_characters() {
        let mut a = Answer {
            action: Action::Evolve,
            reason: "r".repeat(5_000),
            findings: (0..60_000)
                .map(|i| finding(i, &"m".repeat(3_000)))
                .collect(),
            content: None,
        };
        assert_eq!(bound(&mut a), 60_000 - MAX_FINDINGS);
        assert_eq!(a.findings.len(), MAX_FINDINGS);
        assert!(
            a.findings
                .iter()
                .all(|f| f.message.chars().count() == 1_000)
        );
        assert_eq!(a.reason.chars().count(), MAX_REASON_CHARS);
    }

    #[test]
    fn lines_outside_the_file_become_line_1() {
        assert_eq!(line_count(b""), 1);
        assert_eq!(line_count(b"a\nb\n"), 2);
        assert_eq!(line_count(b"a\nb"), 2);
        let mut f = vec![
            finding(0, "a"),
            finding(2, "b"),
            finding(3, "c"),
            finding(u64::MAX, "d"),
        ];
        assert_eq!(within(&mut f, 2), 3);
        let lines: Vec<u64> = f.iter().map(|f| f.line).collect();
        assert_eq!(lines, [1, 2, 1, 1]);
    }
}

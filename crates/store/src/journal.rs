//! The append-only no-op journal `<state>.noops`.
//!
//! A no-op tick must not touch the state file, yet it has to be counted. Each
//! one appends a line here; the next waking tick folds the lines into the
//! state and removes the journal. An outage tick that learned nothing (the
//! head lookup and the listing both failed) leaves the state alone for the
//! same reason and appends an outage line (`<time> !outage`) instead. The first line names an epoch so that a
//! crash between saving the state and removing the journal never counts a
//! no-op twice (see `JournalMark`).

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use chrono::{DateTime, SecondsFormat, Utc};

use super::records::outage;
use super::safe_fs;
use super::schema::JournalMark;
use super::store::sidecar;

const MAGIC: &str = "sentinel-noops epoch=";

/// What an outage line holds where a no-op line holds the head: not a head,
/// so a build that does not know outage lines skips it as malformed.
const OUTAGE: &str = "!outage";

pub fn path_for(state: &Path) -> PathBuf {
    sidecar(state, ".noops")
}

pub use sentinel_core::state::records::journal::Contents;

pub fn read(state: &Path) -> Result<Contents> {
    let path = path_for(state);
    let bytes = match safe_fs::read_bounded(&path, super::limits::MAX_NOOPS_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(Contents::default()),
        Err(e) => {
            return Err(anyhow!(
                "cannot read the no-op journal `{}`: {e}; check its permissions",
                path.display()
            ));
        }
    };
    let mut lines = bytes.split_inclusive(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    // A journal whose epoch line is damaged still counts its lines: losing
    // statistics is worse than a possible recount after a damaged file.
    let epoch = std::str::from_utf8(first)
        .ok()
        .and_then(|l| l.trim_end().strip_prefix(MAGIC))
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    let mut contents = Contents {
        epoch: Some(epoch),
        ..Contents::default()
    };
    // A line torn by a crash has no newline and is not counted.
    for line in lines.filter(|l| l.ends_with(b"\n")) {
        match kind(line) {
            Some(Kind::Noop) => {}
            Some(Kind::Outage(ts)) => contents.outages.push(outage::Line {
                index: contents.lines,
                ts,
            }),
            None => {
                contents.malformed += 1;
                continue;
            }
        }
        contents.lines += 1;
    }
    Ok(contents)
}

/// What a well-formed line counts.
enum Kind {
    Noop,
    Outage(DateTime<Utc>),
}

/// `<RFC 3339 time> <short head or ->\n` (a no-op) or `<RFC 3339 time>
/// !outage\n`, as `append` and `append_outage` write them.
fn kind(line: &[u8]) -> Option<Kind> {
    let text = std::str::from_utf8(line).ok()?.strip_suffix('\n')?;
    let (ts, head) = text.split_once(' ')?;
    let ts = DateTime::parse_from_rfc3339(ts).ok()?.with_timezone(&Utc);
    if head == OUTAGE {
        return Some(Kind::Outage(ts));
    }
    ((1..=64).contains(&head.len()) && head.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .then_some(Kind::Noop)
}

/// Count one no-op. Creates the journal with the epoch after the state's mark.
pub fn append(state: &Path, mark: JournalMark, now: DateTime<Utc>, head: &str) -> Result<()> {
    append_line(state, mark, now, head)
}

/// Count one outage tick that learned nothing, the same way.
pub fn append_outage(state: &Path, mark: JournalMark, now: DateTime<Utc>) -> Result<()> {
    append_line(state, mark, now, OUTAGE)
}

fn append_line(state: &Path, mark: JournalMark, now: DateTime<Utc>, head: &str) -> Result<()> {
    let path = path_for(state);
    let (mut file, _) = safe_fs::open_append(&path, Some(state)).map_err(|e| {
        anyhow!(
            "cannot append to the no-op journal `{}`: {e}; check that the directory is writable",
            path.display()
        )
    })?;
    let mut line = String::new();
    if file.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
        line.push_str(&format!("{MAGIC}{}\n", mark.epoch.wrapping_add(1)));
    }
    line.push_str(&now.to_rfc3339_opts(SecondsFormat::Secs, true));
    line.push(' ');
    line.push_str(head);
    line.push('\n');
    // One write per line: with O_APPEND a short line lands whole or not at all.
    file.write_all(line.as_bytes()).map_err(|e| {
        anyhow!(
            "cannot append to the no-op journal `{}`: {e}",
            path.display()
        )
    })
}

/// The mark to save after folding `contents` into the state.
pub fn fold(mark: JournalMark, contents: &Contents) -> JournalMark {
    match contents.epoch {
        Some(epoch) => JournalMark {
            epoch,
            folded: contents.lines,
        },
        None => mark,
    }
}

/// Remove the journal once the state that folded it is safely saved.
pub fn clear(state: &Path) -> Result<()> {
    let path = path_for(state);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow!(
            "cannot remove the folded no-op journal `{}`: {e}; it is safe to delete by hand",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn now() -> DateTime<Utc> {
        "2026-06-16T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_crash_between_save_and_clear_never_counts_a_noop_twice() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        let mark = JournalMark::default();
        for _ in 0..3 {
            append(&state, mark, now(), "abc").unwrap();
        }
        let contents = read(&state).unwrap();
        assert_eq!(contents.unfolded(mark), 3);
        let saved = fold(mark, &contents);
        // The state is saved with `saved`; the process dies before `clear`.
        assert_eq!(read(&state).unwrap().unfolded(saved), 0);
        append(&state, saved, now(), "abc").unwrap();
        let later = read(&state).unwrap();
        assert_eq!(later.unfolded(saved), 1);
        let saved2 = fold(saved, &later);
        clear(&state).unwrap();
        append(&state, saved2, now(), "abc").unwrap();
        assert_eq!(read(&state).unwrap().unfolded(saved2), 1);
    }

    #[test]
    fn a_torn_last_line_is_not_counted() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        append(&state, JournalMark::default(), now(), "abc").unwrap();
        let path = path_for(&state);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"2026-06-16T00:02").unwrap();
        assert_eq!(read(&state).unwrap().lines, 1);
    }

    #[test]
    fn outage_lines_count_apart_from_noops_and_are_folded_with_them() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        let mark = JournalMark::default();
        let at = |m: i64| now() + chrono::Duration::minutes(m);
        append(&state, mark, at(2), "abc").unwrap();
        append_outage(&state, mark, at(4)).unwrap();
        append_outage(&state, mark, at(6)).unwrap();
        let contents = read(&state).unwrap();
        assert_eq!((contents.lines, contents.malformed), (3, 0));
        assert_eq!(contents.unfolded(mark), 1, "one no-op");
        assert_eq!(contents.unfolded_outages(mark).len(), 2);
        let lines = contents.unfolded_outages(mark);
        assert_eq!(
            lines.iter().map(|l| (l.index, l.ts)).collect::<Vec<_>>(),
            [(1, at(4)), (2, at(6))]
        );
        // Saved, then a crash before the journal is removed: nothing twice.
        let saved = fold(mark, &contents);
        assert_eq!(read(&state).unwrap().unfolded(saved), 0);
        assert!(read(&state).unwrap().unfolded_outages(saved).is_empty());
        assert_eq!(
            fs::read_to_string(path_for(&state)).unwrap(),
            "sentinel-noops epoch=1\n2026-06-16T00:02:00Z abc\n\
             2026-06-16T00:04:00Z !outage\n2026-06-16T00:06:00Z !outage\n"
        );
    }

    #[test]
    fn a_missing_journal_has_nothing_unfolded() {
        let dir = tempfile::tempdir().unwrap();
        let contents = read(&dir.path().join("state.json")).unwrap();
        assert_eq!(contents, Contents::default());
        assert_eq!(
            contents.unfolded(JournalMark {
                epoch: 4,
                folded: 9
            }),
            0
        );
    }
}

//! The decision journal `<state>.decisions`: what was paid for, written
//! down before the state that remembers it is saved.
//!
//! A tick appends an entry, and fsyncs it, before every paid call (the
//! reservation), after it (the answer), before every sandbox commit (the
//! intent) and after it (the commit id). When the save of the state then
//! fails, or the process dies before it, the next tick replays what the
//! state lacks instead of paying again. The first line names an epoch; the
//! state records the epoch and the last entry it folded (a `JournalMark`,
//! as for the no-op journal), so a crash between the save and the removal
//! of the journal never replays an entry twice.
//!
//! The file is created with `O_EXCL` under a random temporary name and
//! renamed into place, and it is never opened through a symbolic link.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha1::Digest as _;

use super::records::llm::{Class, Finding, Usage};
use super::safe_fs;
use super::schema::{JournalMark, Outcome};
use super::store::sidecar;

const MAGIC: &str = "sentinel-decisions";

pub fn path_for(state: &Path) -> PathBuf {
    sidecar(state, ".decisions")
}

/// One line of the journal after the epoch line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Counts up within an epoch; the state's mark names the last one folded.
    pub seq: u64,
    pub ts: DateTime<Utc>,
    pub path: String,
    #[serde(flatten)]
    pub entry: Entry,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// Before a call: the question and what the call may cost.
    Reserve {
        fingerprint: String,
        model: String,
        reserved_usd: f64,
    },
    /// After a call: how it ended and what it cost.
    Answer(Box<Answered>),
    /// Before a sandbox commit: the content id (git blob id) to commit.
    Intent { content_id: String },
    /// After a sandbox commit: the commit that carries the content.
    Commit { content_id: String, commit: String },
}

/// How one call ended, with what it cost: enough to take the same
/// decision again without asking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answered {
    /// The `seq` of the reservation this answers.
    pub call: u64,
    pub fingerprint: String,
    pub model: String,
    /// `llm_skip` or `evolve` for an answer; `failed` or `bad_response`.
    pub outcome: Outcome,
    /// The model's reason, or the failure as the error protocol said it.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// The proposed content of an EVOLVE (`--propose patches`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A failure's error class and the circuit it opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<Class>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_until: Option<DateTime<Utc>>,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Whether the budget counted the call, at what cost, and whether that
    /// cost is an estimate.
    pub billed: bool,
    pub cost_usd: f64,
    pub estimated: bool,
    /// A copy kept for a later tick: its cost is in a saved state already.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub carried: bool,
    /// The agent could not be started: the reservation is taken back, and
    /// nothing is spent, counted or decided.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_started: bool,
}

/// The journal as it is on storage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Journal {
    /// `None` when there is no journal.
    pub epoch: Option<u64>,
    /// The entries that parse; a line torn by a crash is left out.
    pub lines: Vec<Line>,
}

impl Journal {
    /// The entries the state marked `mark` has not folded yet.
    pub fn unfolded(&self, mark: JournalMark) -> impl Iterator<Item = &Line> {
        let after = if self.epoch == Some(mark.epoch) {
            mark.folded
        } else {
            0
        };
        self.lines.iter().filter(move |l| l.seq > after)
    }

    pub fn last_seq(&self) -> u64 {
        self.lines.iter().map(|l| l.seq).max().unwrap_or(0)
    }

    /// Whether a state saved with `mark` holds every entry.
    pub fn folded_by(&self, mark: JournalMark) -> bool {
        self.unfolded(mark).next().is_none()
    }
}

pub use sentinel_core::state::schema::unmarked;

/// The git blob id of `content`: the same id the sandbox branch gives it.
pub fn content_id(content: &str) -> String {
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", content.len()).as_bytes());
    h.update(content.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Parse a journal's bytes. A damaged epoch line replays every entry: a
/// decision replayed for a fingerprint that matches is still the answer to
/// that question, and spend counted twice only refuses a call early.
pub fn parse(bytes: &[u8]) -> Journal {
    #[derive(Deserialize)]
    struct EpochLine {
        journal: String,
        epoch: u64,
    }
    let mut lines = bytes.split(|b| *b == b'\n');
    let epoch = lines
        .next()
        .and_then(|l| serde_json::from_slice::<EpochLine>(l).ok())
        .filter(|e| e.journal == MAGIC)
        .map_or(u64::MAX, |e| e.epoch);
    Journal {
        epoch: Some(epoch),
        lines: lines
            .filter_map(|l| serde_json::from_slice(l).ok())
            .collect(),
    }
}

fn epoch_line(epoch: u64) -> String {
    format!("{{\"journal\":\"{MAGIC}\",\"epoch\":{epoch}}}\n")
}

fn write_error(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!(
        "cannot write the decision journal `{}`: {e}; no model call or sandbox commit is made \
         without it: make the state directory writable and move whatever is in the way of the file",
        path.display()
    )
}

/// Open `path` for `opts` unless it is a symbolic link or not a regular
/// file: the status of the name is compared with that of the open file, so
/// a link swapped in between is refused too. `None` when it is missing.
fn open_regular(path: &Path, opts: &OpenOptions) -> std::io::Result<Option<File>> {
    let named = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let refused = |what: &str| std::io::Error::other(format!("it is {what}, not a file"));
    if named.file_type().is_symlink() {
        return Err(refused("a symbolic link, which sentinel does not follow"));
    }
    if !named.is_file() {
        return Err(refused("a directory or a special file"));
    }
    let file = opts.open(path)?;
    let opened = file.metadata()?;
    if (opened.dev(), opened.ino()) != (named.dev(), named.ino()) {
        return Err(refused("a name that changed while it was opened"));
    }
    Ok(Some(file))
}

/// The journal beside `state`, or an empty one when there is none. A link,
/// a directory or a special file in its place holds nothing sentinel wrote
/// (it never writes through one): no entries, and no append will succeed.
pub fn read(state: &Path) -> Result<Journal> {
    let path = path_for(state);
    if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
        return Ok(Journal::default());
    }
    let read = || -> std::io::Result<Option<Vec<u8>>> {
        let opts = OpenOptions::new()
            .read(true)
            .custom_flags(super::safe_fs::NO_LINK_NO_WAIT)
            .clone();
        let Some(file) = open_regular(&path, &opts)? else {
            return Ok(None);
        };
        let limit = super::limits::MAX_DECISIONS_BYTES;
        let len = file.metadata()?.len();
        if len > limit {
            return Err(safe_fs::too_large_error(&path, len, limit));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        std::io::Read::read_to_end(&mut std::io::Read::take(file, limit + 1), &mut bytes)?;
        if bytes.len() as u64 > limit {
            return Err(safe_fs::too_large_error(&path, bytes.len() as u64, limit));
        }
        Ok(Some(bytes))
    };
    match read() {
        Ok(Some(bytes)) => Ok(parse(&bytes)),
        Ok(None) => Ok(Journal::default()),
        Err(e) => Err(anyhow!(
            "cannot read the decision journal `{}`: {e}; without it sentinel cannot tell what \
             was already paid for: make it a readable file again (or move it away to forget \
             the decisions it holds)",
            path.display()
        )),
    }
}

/// Append `line` and fsync it. A missing journal is created with `epoch`.
pub fn append(state: &Path, epoch: u64, line: &Line) -> Result<()> {
    let path = path_for(state);
    let mut text = sentinel_core::redact::to_string(line)?;
    text.push('\n');
    let appended = (|| -> std::io::Result<bool> {
        let opts = OpenOptions::new()
            .read(true)
            .append(true)
            .custom_flags(super::safe_fs::NO_LINK_NO_WAIT)
            .clone();
        let Some(mut file) = open_regular(&path, &opts)? else {
            return Ok(false);
        };
        // A line torn by a crash is ended first, so this one parses.
        let len = file.metadata()?.len();
        let mut last = [b'\n'];
        if len > 0 {
            file.read_exact_at(&mut last, len - 1)?;
        }
        let prefix = if last[0] == b'\n' { "" } else { "\n" };
        // One write per line: with O_APPEND it lands after everything else.
        file.write_all(format!("{prefix}{text}").as_bytes())?;
        file.sync_data()?;
        Ok(true)
    })()
    .map_err(|e| write_error(&path, e))?;
    if appended {
        return Ok(());
    }
    let whole = format!("{}{text}", epoch_line(epoch));
    safe_fs::replace(&path, whole.as_bytes(), Some(state)).map_err(|e| write_error(&path, e))
}

/// Remove the journal once a saved state with `mark` holds all of it; a
/// journal with entries the state lacks is kept.
pub fn clear(state: &Path, mark: JournalMark) -> Result<()> {
    let path = path_for(state);
    // Only sentinel's own file is removed, never what stands in its place.
    if !fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) || !read(state)?.folded_by(mark) {
        return Ok(());
    }
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow!(
            "cannot remove the folded decision journal `{}`: {e}; the saved state holds all of \
             it, so it is safe to delete by hand",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-06-16T00:00:00Z".parse().unwrap()
    }

    fn reserve(seq: u64) -> Line {
        Line {
            seq,
            ts: now(),
            path: "src/auth.js".into(),
            entry: Entry::Reserve {
                fingerprint: "fp".into(),
                model: "gpt-4o-mini".into(),
                reserved_usd: 0.001,
            },
        }
    }

    #[test]
    fn entries_are_json_lines_after_an_epoch_line() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        append(&state, 4, &reserve(1)).unwrap();
        append(&state, 9, &reserve(2)).unwrap();
        let text = fs::read_to_string(path_for(&state)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], r#"{"journal":"sentinel-decisions","epoch":4}"#);
        assert!(
            lines[1].starts_with(
                r#"{"seq":1,"ts":"2026-06-16T00:00:00Z","path":"src/auth.js","kind":"reserve","#
            ),
            "{}",
            lines[1]
        );
        let journal = read(&state).unwrap();
        assert_eq!(journal.epoch, Some(4));
        assert_eq!(journal.lines, [reserve(1), reserve(2)]);
    }

    #[test]
    fn a_crash_between_save_and_clear_never_replays_an_entry_twice() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        let mark = JournalMark::default();
        append(&state, 1, &reserve(1)).unwrap();
        append(&state, 1, &reserve(2)).unwrap();
        let journal = read(&state).unwrap();
        assert_eq!(journal.unfolded(mark).count(), 2);
        // The state is saved with this mark; the process dies before `clear`.
        let saved = JournalMark {
            epoch: 1,
            folded: 2,
        };
        assert!(read(&state).unwrap().folded_by(saved));
        append(&state, 1, &reserve(3)).unwrap();
        let later = read(&state).unwrap();
        let unfolded: Vec<u64> = later.unfolded(saved).map(|l| l.seq).collect();
        assert_eq!(unfolded, [3]);
        // A journal the state does not hold whole is kept.
        clear(&state, saved).unwrap();
        assert!(path_for(&state).exists());
        clear(
            &state,
            JournalMark {
                epoch: 1,
                folded: 3,
            },
        )
        .unwrap();
        assert!(!path_for(&state).exists());
    }

    #[test]
    fn a_torn_last_line_is_left_out_and_the_next_entry_still_parses() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        append(&state, 1, &reserve(1)).unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(path_for(&state))
            .unwrap();
        f.write_all(br#"{"seq":2,"ts":"2026-06"#).unwrap();
        assert_eq!(read(&state).unwrap().lines.len(), 1);
        append(&state, 1, &reserve(3)).unwrap();
        let seqs: Vec<u64> = read(&state).unwrap().lines.iter().map(|l| l.seq).collect();
        assert_eq!(seqs, [1, 3]);
    }

    #[test]
    fn a_damaged_epoch_line_replays_everything() {
        let journal = parse(b"garbage\n{\"not\":\"an entry\"}\n");
        assert_eq!(journal.epoch, Some(u64::MAX));
        assert!(journal.lines.is_empty());
        assert_eq!(
            read(Path::new("/nonexistent/state.json")).unwrap(),
            Journal::default()
        );
    }

    #[test]
    fn a_symbolic_link_or_a_directory_in_the_way_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        let target = dir.path().join("elsewhere");
        fs::write(&target, "mine\n").unwrap();
        std::os::unix::fs::symlink(&target, path_for(&state)).unwrap();
        let err = append(&state, 1, &reserve(1)).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(
            err.contains(&format!("`{}`", path_for(&state).display())),
            "{err}"
        );
        assert_eq!(read(&state).unwrap(), Journal::default());
        assert_eq!(fs::read_to_string(&target).unwrap(), "mine\n");

        fs::remove_file(path_for(&state)).unwrap();
        fs::create_dir(path_for(&state)).unwrap();
        let err = append(&state, 1, &reserve(1)).unwrap_err().to_string();
        assert!(
            err.contains("no model call or sandbox commit is made"),
            "{err}"
        );
    }

    #[test]
    fn the_content_id_is_the_git_blob_id() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            content_id("hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }
}

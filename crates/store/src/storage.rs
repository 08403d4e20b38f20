//! Where a tick keeps its state: files next to `--state`, or memory (for
//! `simulate`). The tick orders the same effects on either.

use std::path::{Path, PathBuf};

use anyhow::Result;
use chrono::{DateTime, Utc};

use super::decisions::{self, Journal, Line};
use super::journal::{self, Contents};
use super::schema::{Header, JournalMark, State};
use super::store::{self, LockAttempt, StateLock};

pub trait Storage {
    /// Take the exclusive lock; `Err(name)` of the holder's lock when busy.
    fn try_lock(&mut self) -> Result<std::result::Result<(), PathBuf>>;
    /// The header line only; `None` before the first save.
    fn load_header(&mut self) -> Result<Option<Header>>;
    fn load(&mut self) -> Result<Option<State>>;
    /// Atomically replace the state; returns the bytes written.
    fn save(&mut self, state: &State) -> Result<u64>;
    fn journal_read(&mut self) -> Result<Contents>;
    fn journal_append(&mut self, mark: JournalMark, now: DateTime<Utc>, head: &str) -> Result<()>;
    /// Count an outage tick that learned nothing, where a no-op is counted.
    fn outage_append(&mut self, mark: JournalMark, now: DateTime<Utc>) -> Result<()>;
    fn journal_clear(&mut self) -> Result<()>;
    /// The decision journal: what was paid for and may not be in the state.
    fn decisions_read(&mut self) -> Result<Journal>;
    /// Append one entry durably; a missing journal is created with `epoch`.
    fn decisions_append(&mut self, epoch: u64, line: &Line) -> Result<()>;
    /// Remove the decision journal once a state saved with `mark` holds it all.
    fn decisions_clear(&mut self, mark: JournalMark) -> Result<()>;
    /// The last admitted triggered start.
    fn read_start(&mut self) -> Result<Option<DateTime<Utc>>>;
    fn write_start(&mut self, now: DateTime<Utc>) -> Result<()>;
    /// A report file (the Code Quality report), replaced atomically.
    fn write_report(&mut self, path: &Path, bytes: &[u8]) -> Result<()>;
}

/// The state file and its sidecars on disk.
#[derive(Debug)]
pub struct FileStorage {
    path: PathBuf,
    lock: Option<StateLock>,
    /// What the last load read of the manifest, for the save to copy what
    /// is unchanged.
    kept: Option<store::Kept>,
    /// The state file as the header's read left it, for the load to read on
    /// (a wake read the file twice, the header line twice); dropped by a save.
    opened: Option<store::Opened>,
}

impl FileStorage {
    pub fn new(path: &Path) -> FileStorage {
        FileStorage {
            path: path.to_path_buf(),
            lock: None,
            kept: None,
            opened: None,
        }
    }
}

impl Storage for FileStorage {
    fn try_lock(&mut self) -> Result<std::result::Result<(), PathBuf>> {
        Ok(match store::try_lock(&self.path)? {
            LockAttempt::Acquired(lock) => {
                self.lock = Some(lock);
                Ok(())
            }
            LockAttempt::Busy(path) => Err(path),
        })
    }
    fn load_header(&mut self) -> Result<Option<Header>> {
        let (header, opened) = store::load_header_opened(&self.path)?;
        self.opened = opened;
        Ok(header)
    }
    fn load(&mut self) -> Result<Option<State>> {
        let opened = self.opened.take();
        Ok(
            store::load_kept_from(&self.path, opened)?.map(|(state, kept)| {
                self.kept = kept;
                state
            }),
        )
    }
    fn save(&mut self, state: &State) -> Result<u64> {
        self.opened = None;
        store::save_kept(&self.path, state, self.kept.as_ref())
    }
    fn journal_read(&mut self) -> Result<Contents> {
        journal::read(&self.path)
    }
    fn journal_append(&mut self, mark: JournalMark, now: DateTime<Utc>, head: &str) -> Result<()> {
        journal::append(&self.path, mark, now, head)
    }
    fn outage_append(&mut self, mark: JournalMark, now: DateTime<Utc>) -> Result<()> {
        journal::append_outage(&self.path, mark, now)
    }
    fn journal_clear(&mut self) -> Result<()> {
        journal::clear(&self.path)
    }
    fn decisions_read(&mut self) -> Result<Journal> {
        decisions::read(&self.path)
    }
    fn decisions_append(&mut self, epoch: u64, line: &Line) -> Result<()> {
        decisions::append(&self.path, epoch, line)
    }
    fn decisions_clear(&mut self, mark: JournalMark) -> Result<()> {
        decisions::clear(&self.path, mark)
    }
    fn read_start(&mut self) -> Result<Option<DateTime<Utc>>> {
        store::read_start(&self.path)
    }
    fn write_start(&mut self, now: DateTime<Utc>) -> Result<()> {
        store::write_start(&self.path, now)
    }
    fn write_report(&mut self, path: &Path, bytes: &[u8]) -> Result<()> {
        store::write_report(path, bytes)
    }
}

/// The same document and sidecars, in memory; it counts what it writes.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    state: Option<Vec<u8>>,
    journal: Option<Contents>,
    decisions: Journal,
    start: Option<DateTime<Utc>>,
    /// When set, `try_lock` reports the lock as held by another tick.
    pub busy: bool,
    /// State saves (not journal lines).
    pub saves: u64,
    pub bytes_written: u64,
    pub journal_lines: u64,
    /// Entries appended to the decision journal.
    pub decision_lines: u64,
}

impl MemoryStorage {
    pub fn new() -> MemoryStorage {
        MemoryStorage::default()
    }

    /// The journal, started with the epoch after `mark` when missing.
    fn journal_entry(&mut self, mark: JournalMark) -> &mut Contents {
        self.journal.get_or_insert_with(|| Contents {
            epoch: Some(mark.epoch.wrapping_add(1)),
            ..Contents::default()
        })
    }
}

impl Storage for MemoryStorage {
    fn try_lock(&mut self) -> Result<std::result::Result<(), PathBuf>> {
        Ok(if self.busy {
            Err(PathBuf::from("memory.lock"))
        } else {
            Ok(())
        })
    }
    fn load_header(&mut self) -> Result<Option<Header>> {
        Ok(self.load()?.map(|s| s.header()))
    }
    fn load(&mut self) -> Result<Option<State>> {
        Ok(match &self.state {
            Some(bytes) => Some(serde_json::from_slice(bytes)?),
            None => None,
        })
    }
    fn save(&mut self, state: &State) -> Result<u64> {
        let bytes = store::encode(state)?;
        let n = bytes.len() as u64;
        self.state = Some(bytes);
        self.saves += 1;
        self.bytes_written += n;
        Ok(n)
    }
    fn journal_read(&mut self) -> Result<Contents> {
        Ok(self.journal.clone().unwrap_or_default())
    }
    fn journal_append(
        &mut self,
        mark: JournalMark,
        _now: DateTime<Utc>,
        _head: &str,
    ) -> Result<()> {
        self.journal_entry(mark).lines += 1;
        self.journal_lines += 1;
        Ok(())
    }
    fn outage_append(&mut self, mark: JournalMark, now: DateTime<Utc>) -> Result<()> {
        let journal = self.journal_entry(mark);
        journal.outages.push(super::records::outage::Line {
            index: journal.lines,
            ts: now,
        });
        journal.lines += 1;
        self.journal_lines += 1;
        Ok(())
    }
    fn journal_clear(&mut self) -> Result<()> {
        self.journal = None;
        Ok(())
    }
    fn decisions_read(&mut self) -> Result<Journal> {
        Ok(self.decisions.clone())
    }
    fn decisions_append(&mut self, epoch: u64, line: &Line) -> Result<()> {
        self.decisions.epoch.get_or_insert(epoch);
        self.decisions.lines.push(line.clone());
        self.decision_lines += 1;
        Ok(())
    }
    fn decisions_clear(&mut self, mark: JournalMark) -> Result<()> {
        if self.decisions.folded_by(mark) {
            self.decisions = Journal::default();
        }
        Ok(())
    }
    fn read_start(&mut self) -> Result<Option<DateTime<Utc>>> {
        Ok(self.start)
    }
    fn write_start(&mut self, now: DateTime<Utc>) -> Result<()> {
        self.start = Some(now);
        Ok(())
    }
    fn write_report(&mut self, _path: &Path, bytes: &[u8]) -> Result<()> {
        self.bytes_written += bytes.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::Rules;
    use crate::schema::FileRecord;
    use std::collections::BTreeSet;

    /// A wake opened the state file for its header, then again for the
    /// whole state, and read the header line twice: the load reads on from
    /// the file the header's read left open (a tick holds the lock, so it is
    /// the same file), and a save drops it.
    #[test]
    fn a_wake_opens_the_state_file_once_for_its_header_and_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut s = State::new();
        s.wake.ticks = 3;
        s.files.set_rules(Rules {
            locked: |_, _| false,
            review_due: |_, _, _| None,
            import_dirs: |_, _| BTreeSet::new(),
        });
        for i in 0..600 {
            s.files
                .insert(format!("src/f{i}.js"), FileRecord::default());
        }
        store::save(&path, &s).unwrap();
        let mut storage = FileStorage::new(&path);
        assert_eq!(storage.load_header().unwrap().unwrap().wake.ticks, 3);
        // Gone from its name, the file is still the one opened.
        let moved = dir.path().join("moved.json");
        std::fs::rename(&path, &moved).unwrap();
        let state = storage.load().unwrap().expect("read from the open file");
        assert_eq!(state.wake.ticks, 3);
        assert_eq!(state.files.len(), 600);
        // Read once: the next load opens the name again, and finds nothing.
        assert!(storage.load().unwrap().is_none());
        std::fs::rename(&moved, &path).unwrap();
        storage.load_header().unwrap();
        storage.save(&state).unwrap();
        assert!(storage.opened.is_none(), "a save drops the open file");
    }
}

//! What the no-op journal holds once read: its epoch and its lines, and how
//! many of them the state has already folded (the store reads the file).

use super::outage;
use crate::state::schema::JournalMark;

/// What the journal holds right now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Contents {
    /// `None` when the file is missing.
    pub epoch: Option<u64>,
    /// Well-formed lines after the epoch line: no-op and outage lines.
    pub lines: u64,
    /// Complete lines that are neither (skipped, not counted).
    pub malformed: u64,
    /// The outage lines among `lines`, in order.
    pub outages: Vec<outage::Line>,
}

impl Contents {
    /// The first line the state has not folded yet.
    pub fn start(&self, mark: JournalMark) -> u64 {
        match self.epoch {
            Some(e) if e == mark.epoch => mark.folded.min(self.lines),
            _ => 0,
        }
    }

    /// The outage lines the state has not folded yet.
    pub fn unfolded_outages(&self, mark: JournalMark) -> &[outage::Line] {
        let start = self.start(mark);
        let first = self.outages.partition_point(|l| l.index < start);
        &self.outages[first..]
    }

    /// No-op lines the state has not folded yet.
    pub fn unfolded(&self, mark: JournalMark) -> u64 {
        let lines = self.lines - self.start(mark);
        lines - self.unfolded_outages(mark).len() as u64
    }
}

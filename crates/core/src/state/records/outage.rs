//! An outage line of the no-op journal; `gate::outage` replays the run.

use chrono::{DateTime, Utc};

/// An outage line of the no-op journal: its place among the journal's
/// well-formed lines (outage and no-op lines alike) and its tick's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    pub index: u64,
    pub ts: DateTime<Utc>,
}

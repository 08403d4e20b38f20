//! The source's outages as a run of ticks: how many, in a row, since when.
//!
//! An outage tick that learns nothing leaves only a journal line, so the
//! run is replayed from the saved record and the journal's lines in order:
//! a no-op line between two outage lines is a head lookup that answered,
//! and it ends the run.

use chrono::{DateTime, Utc};

use crate::state::records::journal::Contents;
pub use crate::state::records::outage::Line;
use crate::state::{JournalMark, Outage};

/// `o` after one more tick: an outage at `now`, or a tick whose head
/// lookup answered (which ends the run and keeps the totals).
pub fn record(o: Outage, outage: bool, now: DateTime<Utc>) -> Outage {
    if !outage {
        return Outage {
            consecutive: 0,
            since: None,
            ..o
        };
    }
    Outage {
        ticks: o.ticks + 1,
        consecutive: o.consecutive + 1,
        since: o.since.or(Some(now)),
        last: Some(now),
    }
}

/// `saved` brought up to date with the journal lines `start..end` not yet
/// folded into it: `outages` are the outage lines among them, in order;
/// every other line is a no-op.
pub fn replay(saved: Outage, outages: &[Line], start: u64, end: u64) -> Outage {
    let mut o = saved;
    let mut next = start;
    for line in outages {
        if line.index > next {
            o = record(o, false, line.ts);
        }
        o = record(o, true, line.ts);
        next = line.index + 1;
    }
    if end > next {
        o = record(o, false, o.last.unwrap_or_default());
    }
    o
}

/// `saved` (the state's outage record) with the journal's lines that the
/// state at `mark` has not folded yet replayed.
pub fn so_far(journal: &Contents, saved: Outage, mark: JournalMark) -> Outage {
    let outages = journal.unfolded_outages(mark);
    replay(saved, outages, journal.start(mark), journal.lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(minute: i64) -> DateTime<Utc> {
        "2026-06-16T00:00:00Z".parse::<DateTime<Utc>>().unwrap() + chrono::Duration::minutes(minute)
    }

    #[test]
    fn outage_ticks_in_a_row_count_from_the_first_one() {
        let o = record(record(Outage::default(), true, t(2)), true, t(4));
        assert_eq!(
            o,
            Outage {
                ticks: 2,
                consecutive: 2,
                since: Some(t(2)),
                last: Some(t(4))
            }
        );
        let over = record(o, false, t(6));
        assert_eq!(
            (over.ticks, over.consecutive, over.since, over.last),
            (2, 0, None, Some(t(4)))
        );
    }

    #[test]
    fn a_noop_line_between_outage_lines_ends_the_run() {
        // Lines: outage, no-op, outage, outage.
        let lines = [
            Line { index: 0, ts: t(2) },
            Line { index: 2, ts: t(6) },
            Line { index: 3, ts: t(8) },
        ];
        let o = replay(Outage::default(), &lines, 0, 4);
        assert_eq!(
            (o.ticks, o.consecutive, o.since, o.last),
            (3, 2, Some(t(6)), Some(t(8)))
        );
        // A no-op after them ends the run too.
        let o = replay(Outage::default(), &lines, 0, 5);
        assert_eq!((o.ticks, o.consecutive, o.since), (3, 0, None));
    }

    #[test]
    fn a_saved_run_goes_on_only_when_the_next_line_is_an_outage() {
        let saved = record(Outage::default(), true, t(2));
        let on = replay(saved, &[Line { index: 0, ts: t(4) }], 0, 1);
        assert_eq!((on.ticks, on.consecutive, on.since), (2, 2, Some(t(2))));
        let broken = replay(saved, &[Line { index: 1, ts: t(6) }], 0, 2);
        assert_eq!(
            (broken.ticks, broken.consecutive, broken.since),
            (2, 1, Some(t(6)))
        );
        // Lines already folded (before `start`) are not counted again.
        let again = replay(on, &[Line { index: 0, ts: t(4) }][..0], 1, 1);
        assert_eq!(again, on);
    }

    #[test]
    fn the_run_so_far_replays_only_the_lines_the_state_has_not_folded() {
        // Lines: no-op, outage, outage; the state folded the first one.
        let journal = Contents {
            epoch: Some(1),
            lines: 3,
            malformed: 0,
            outages: vec![Line { index: 1, ts: t(4) }, Line { index: 2, ts: t(6) }],
        };
        let mark = JournalMark {
            epoch: 1,
            folded: 1,
        };
        let o = so_far(&journal, Outage::default(), mark);
        assert_eq!((o.ticks, o.consecutive, o.since), (2, 2, Some(t(4))));
        // Another epoch: every line is unfolded, and the no-op comes first.
        let o = so_far(
            &journal,
            Outage::default(),
            JournalMark {
                epoch: 7,
                folded: 3,
            },
        );
        assert_eq!((o.ticks, o.consecutive, o.since), (2, 2, Some(t(4))));
    }
}

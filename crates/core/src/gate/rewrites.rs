//! The rewrite limit: an agent (or a patch) may rewrite one file at most
//! `--max-rewrites` times in a rolling window, and what it wrote is
//! remembered so that the watched branch holding it is not new evidence.

use chrono::{DateTime, Duration, Utc};

use crate::state::FileRecord;

/// The window the rewrite limit counts in.
pub const WINDOW: Duration = Duration::days(7);

/// Own outputs remembered per file, the newest last.
const KEEP: usize = 8;

/// Remember that `record` was rewritten at `now` with content `hash`.
pub fn record(record: &mut FileRecord, hash: &str, now: DateTime<Utc>) {
    record.own_output.retain(|h| h != hash);
    record.own_output.push(hash.to_string());
    if record.own_output.len() > KEEP {
        let extra = record.own_output.len() - KEEP;
        record.own_output.drain(..extra);
    }
    record.rewrites.retain(|t| now - *t < WINDOW && *t <= now);
    record.rewrites.push(now);
}

/// Whether the file's current content is what an agent or a patch wrote.
pub fn is_own_output(record: &FileRecord, hash: &str) -> bool {
    record.own_output.iter().any(|h| h == hash)
}

/// Rewrites within the window ending at `now`.
pub fn in_window(record: &FileRecord, now: DateTime<Utc>) -> usize {
    record
        .rewrites
        .iter()
        .filter(|t| now - **t < WINDOW && **t <= now)
        .count()
}

/// Whether handing the file over again would pass the limit (`max` 0 is
/// no limit). A stuck file stays stuck until a person resets it or its
/// rewrites leave the window (`stuck_until`).
pub fn stuck(record: &FileRecord, max: u32, now: DateTime<Utc>) -> bool {
    stuck_until(record, max, now).is_some()
}

/// When a stuck file is handed over again by itself: when enough of its
/// rewrites have left the window that one more is within the limit. `None`
/// when it is not stuck at `now`.
pub fn stuck_until(record: &FileRecord, max: u32, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if max == 0 {
        return None;
    }
    let mut inside: Vec<DateTime<Utc>> = record
        .rewrites
        .iter()
        .filter(|t| now - **t < WINDOW && **t <= now)
        .copied()
        .collect();
    let max = max as usize;
    if inside.len() < max {
        return None;
    }
    inside.sort();
    Some(inside[inside.len() - max] + WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(h: i64) -> DateTime<Utc> {
        "2026-06-16T00:00:00Z".parse::<DateTime<Utc>>().unwrap() + Duration::hours(h)
    }

    #[test]
    fn three_rewrites_in_seven_days_make_the_next_hand_over_stuck() {
        let mut r = FileRecord::default();
        for (i, h) in [0, 24, 48].into_iter().enumerate() {
            assert!(!stuck(&r, 3, t(h)), "before rewrite {i}");
            record(&mut r, &format!("h{i}"), t(h));
        }
        assert!(stuck(&r, 3, t(49)));
        assert!(!stuck(&r, 0, t(49)), "0 is no limit");
        assert_eq!(stuck_until(&r, 3, t(49)), Some(t(24 * 7)));
        // Seven days after the first rewrite only two are in the window.
        assert!(!stuck(&r, 3, t(24 * 7 + 1)));
        assert_eq!(stuck_until(&r, 3, t(24 * 7)), None);
    }

    #[test]
    fn a_stuck_mark_expires_when_the_window_has_passed() {
        let mut r = FileRecord::default();
        for h in [0, 1, 2, 3] {
            record(&mut r, &format!("h{h}"), t(h));
        }
        r.stuck = true;
        // Four rewrites, a limit of 3: stuck until the second leaves the window.
        assert_eq!(stuck_until(&r, 3, t(4)), Some(t(24 * 7 + 1)));
        assert!(stuck(&r, 3, t(24 * 7)));
        assert!(!stuck(&r, 3, t(24 * 7 + 1)), "the mark outlived its window");
        assert!(!stuck(&r, 3, t(24 * 11)));
    }

    #[test]
    fn own_output_is_recognised_by_content_and_bounded() {
        let mut r = FileRecord::default();
        for i in 0..10 {
            record(&mut r, &format!("h{i}"), t(i));
        }
        assert!(is_own_output(&r, "h9") && is_own_output(&r, "h2"));
        assert!(!is_own_output(&r, "h1"), "only the newest {KEEP} are kept");
        assert!(!is_own_output(&r, "something a person wrote"));
    }
}

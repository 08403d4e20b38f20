//! How a file matures (under observation → stable → certified, or locked by
//! configuration) and when a mature file is reviewed again.

pub use crate::state::records::lifecycle::Review;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// Unchanged this long, with a SKIP as its last decision: stable.
pub fn stable_after() -> Duration {
    Duration::days(3)
}

/// Stable this much longer, with no rollback: certified.
pub fn certified_after() -> Duration {
    Duration::days(7)
}

/// The first review interval, and the one a changed outcome resets to.
pub const FIRST_INTERVAL_DAYS: u32 = 7;
/// Identical reviews double the interval up to this.
pub const MAX_INTERVAL_DAYS: u32 = 90;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    UnderObservation,
    Stable,
    Certified,
    Locked,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::UnderObservation => "under_observation",
            Status::Stable => "stable",
            Status::Certified => "certified",
            Status::Locked => "locked",
        }
    }

    /// Stable and certified files are reviewed on a schedule.
    pub fn is_mature(self) -> bool {
        matches!(self, Status::Stable | Status::Certified)
    }
}

/// The status at `now`. `changed` is when the file's bytes last changed;
/// a clock that went backwards counts as no time passed.
pub fn status(
    changed: DateTime<Utc>,
    last_was_skip: bool,
    rollback_streak: u32,
    locked: bool,
    now: DateTime<Utc>,
) -> Status {
    if locked {
        return Status::Locked;
    }
    if !last_was_skip {
        return Status::UnderObservation;
    }
    let age = (now - changed).max(Duration::zero());
    if age >= stable_after() + certified_after() && rollback_streak == 0 {
        Status::Certified
    } else if age >= stable_after() {
        Status::Stable
    } else {
        Status::UnderObservation
    }
}

/// When the file is next due for review, if it is mature: its schedule, or,
/// before its first review, one interval after it became stable.
pub fn due_at(
    changed: DateTime<Utc>,
    review: Option<&Review>,
    status: Status,
) -> Option<DateTime<Utc>> {
    if !status.is_mature() {
        return None;
    }
    Some(match review {
        Some(r) => r.next,
        None => changed + stable_after() + Duration::days(i64::from(FIRST_INTERVAL_DAYS)),
    })
}

/// The schedule after a review at `now`. An identical outcome doubles the
/// interval (7 → 14 → 28 … capped at 90 days) so a quiet file is not due
/// forever; a different outcome starts over at 7 days.
pub fn after_review(prev: Option<&Review>, identical: bool, now: DateTime<Utc>) -> Review {
    let last = prev.map_or(FIRST_INTERVAL_DAYS, |r| r.interval_days.max(1));
    let interval_days = if identical {
        (last.saturating_mul(2)).min(MAX_INTERVAL_DAYS)
    } else {
        FIRST_INTERVAL_DAYS
    };
    Review {
        next: now + Duration::days(i64::from(interval_days)),
        interval_days,
    }
}

/// Does `path` match a `--lock` pattern? `*` and `?` stay within one path
/// segment, `**` crosses them; a pattern without a `/` matches the file name
/// anywhere, and one ending in `/` everything below that directory, as in
/// `.gitignore`.
pub fn matches(pattern: &str, path: &str) -> bool {
    locked(path, std::slice::from_ref(&pattern.to_string()))
}

/// Does `path` match any of the `--lock` patterns? They are compiled once
/// for the list a tick holds (globset: linear time, where a backtracking
/// match of `*a*a*a*a*ab` took seconds on one path).
pub fn locked(path: &str, locks: &[String]) -> bool {
    !locks.is_empty() && compiled(locks).is_match(path)
}

/// A `--lock` pattern as the glob it stands for, or why it is none.
pub fn lock_glob(pattern: &str) -> Result<globset::Glob, String> {
    let p = pattern.trim_start_matches("./");
    // A `/` before the end anchors the pattern at the root (a leading one
    // only says so); without one it matches at any depth.
    let anchored = p.trim_end_matches('/').contains('/');
    let p = p.strip_prefix('/').unwrap_or(p);
    let p = match p.strip_suffix('/') {
        Some(dir) => format!("{dir}/**"),
        None => p.to_string(),
    };
    let p = if anchored { p } else { format!("**/{p}") };
    globset::GlobBuilder::new(&p)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| e.kind().to_string())
}

/// The glob set of `locks`: the last one built is kept, since a tick asks
/// with the same list for every file.
fn compiled(locks: &[String]) -> std::sync::Arc<globset::GlobSet> {
    use std::sync::{Arc, Mutex};
    type Last = Option<(Vec<String>, Arc<globset::GlobSet>)>;
    static LAST: Mutex<Last> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((patterns, set)) = last.as_ref()
        && patterns.as_slice() == locks
    {
        return set.clone();
    }
    let mut builder = globset::GlobSetBuilder::new();
    // A pattern that is no glob was refused on the command line; one in an
    // older state is left out rather than matched as something else.
    for glob in locks.iter().filter_map(|l| lock_glob(l).ok()) {
        builder.add(glob);
    }
    let set = Arc::new(
        builder
            .build()
            .unwrap_or_else(|_| globset::GlobSet::empty()),
    );
    *last = Some((locks.to_vec(), set.clone()));
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_pattern_that_backtracked_for_seconds_matches_in_linear_time() {
        // The old backtracking match of this pair took 13 s at 60 characters
        // and doubles with each further one: a regression hangs the watchdog.
        let pattern = "*a*a*a*a*a*a*a*ab".to_string();
        let path = "a".repeat(90);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(locked(&path, &[pattern])).unwrap());
        let matched = rx.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(matched, Ok(false));
    }

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_skipped_file_unchanged_for_three_days_is_stable_then_certified_after_seven_more() {
        let changed = t("2026-01-01T00:00:00Z");
        let at = |d: i64| changed + Duration::days(d);
        assert_eq!(
            status(changed, true, 0, false, at(2)),
            Status::UnderObservation
        );
        assert_eq!(status(changed, true, 0, false, at(3)), Status::Stable);
        assert_eq!(status(changed, true, 0, false, at(9)), Status::Stable);
        assert_eq!(status(changed, true, 0, false, at(10)), Status::Certified);
    }

    #[test]
    fn a_rollback_keeps_a_file_from_being_certified() {
        let changed = t("2026-01-01T00:00:00Z");
        assert_eq!(
            status(changed, true, 1, false, changed + Duration::days(30)),
            Status::Stable
        );
    }

    #[test]
    fn a_file_whose_last_decision_is_not_a_skip_stays_under_observation() {
        let changed = t("2026-01-01T00:00:00Z");
        assert_eq!(
            status(changed, false, 0, false, changed + Duration::days(30)),
            Status::UnderObservation
        );
    }

    #[test]
    fn locked_wins_over_everything() {
        let changed = t("2026-01-01T00:00:00Z");
        assert_eq!(status(changed, false, 3, true, changed), Status::Locked);
    }

    #[test]
    fn a_clock_that_went_backwards_counts_as_no_time_passed() {
        let changed = t("2026-01-10T00:00:00Z");
        assert_eq!(
            status(changed, true, 0, false, t("2026-01-01T00:00:00Z")),
            Status::UnderObservation
        );
    }

    #[test]
    fn only_mature_files_are_due_and_the_first_review_comes_one_interval_after_stability() {
        let changed = t("2026-01-01T00:00:00Z");
        assert_eq!(due_at(changed, None, Status::UnderObservation), None);
        assert_eq!(due_at(changed, None, Status::Locked), None);
        assert_eq!(
            due_at(changed, None, Status::Stable),
            Some(t("2026-01-11T00:00:00Z"))
        );
    }

    #[test]
    fn identical_reviews_double_the_interval_up_to_ninety_days_and_a_change_resets_it() {
        let now = t("2026-03-01T00:00:00Z");
        let mut r = after_review(None, true, now);
        let mut intervals = vec![r.interval_days];
        for _ in 0..5 {
            r = after_review(Some(&r), true, now);
            intervals.push(r.interval_days);
        }
        assert_eq!(intervals, [14, 28, 56, 90, 90, 90]);
        assert_eq!(r.next, now + Duration::days(90));
        assert_eq!(after_review(Some(&r), false, now).interval_days, 7);
    }

    #[test]
    fn lock_patterns_match_like_gitignore() {
        assert!(matches("vendor/**", "vendor/a/b.js"));
        assert!(matches("src/*.rs", "src/main.rs"));
        assert!(!matches("src/*.rs", "src/gate/wake.rs"));
        assert!(matches("src/**/*.rs", "src/gate/wake.rs"));
        assert!(matches("*.lock", "deep/down/Cargo.lock"));
        assert!(matches(
            "libs/shared/crypto-vault.js",
            "libs/shared/crypto-vault.js"
        ));
        assert!(matches("a?.js", "ab.js"));
        assert!(!matches("a?.js", "a/.js"));
        assert!(!matches("libs/*", "libs/x/y.js"));
        assert!(matches("libs/", "libs/x/y.js"));
        assert!(matches("/Cargo.lock", "Cargo.lock"));
        assert!(!matches("/Cargo.lock", "sub/Cargo.lock"));
        assert!(matches("./src/*.rs", "src/main.rs"));
        assert!(lock_glob("src/[").is_err());
    }
}

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
/// anywhere, as in `.gitignore`.
pub fn matches(pattern: &str, path: &str) -> bool {
    let pattern = pattern.trim_start_matches("./");
    if !pattern.contains('/') {
        let name = path.rsplit('/').next().unwrap_or(path);
        return glob(pattern.as_bytes(), name.as_bytes());
    }
    glob(pattern.as_bytes(), path.as_bytes())
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) if rest.first() == Some(&b'*') => {
            let rest = &rest[1..];
            let rest = rest.strip_prefix(b"/").unwrap_or(rest);
            (0..=s.len()).any(|i| glob(rest, &s[i..]))
        }
        Some((b'*', rest)) => (0..=s.len())
            .take_while(|i| *i == 0 || s[i - 1] != b'/')
            .any(|i| glob(rest, &s[i..])),
        Some((b'?', rest)) => s.first().is_some_and(|c| *c != b'/') && glob(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}

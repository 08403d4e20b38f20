//! The fleet's ledger: its book (`tick::FleetBook`: each project's spend of
//! the UTC day, the provider's circuit) kept beside the projects' states in
//! `DIR/fleet.json` from one run to the next.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use chrono::{DateTime, Utc};

use crate::state::safe_fs;
use crate::tick::FleetBook;

/// The most bytes a ledger may hold: a day's spend of many thousand projects.
const MAX_LEDGER_BYTES: u64 = 4 << 20;

pub fn path(dir: &Path) -> PathBuf {
    dir.join("fleet.json")
}

/// The book under `dir`, on `now`'s UTC day: a missing ledger is empty, a
/// damaged one an error that names it (the fleet would otherwise forget
/// its spend), and another day's spend is not today's.
pub fn load(dir: &Path, now: DateTime<Utc>) -> Result<FleetBook> {
    let path = path(dir);
    let read = safe_fs::read_bounded(&path, MAX_LEDGER_BYTES)
        .map_err(|e| anyhow!("cannot read the fleet ledger `{}`: {e}", path.display()))?;
    let mut book: FleetBook = match read {
        None => FleetBook::default(),
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            anyhow!(
                "the fleet ledger `{}` is damaged ({e}); restore it, or move it away to count today's fleet spend from 0",
                path.display()
            )
        })?,
    };
    if book.spent.values().any(|v| !v.is_finite() || *v < 0.0) {
        bail!(
            "the fleet ledger `{}` holds a spend that is negative or not a number; restore it, or move it away",
            path.display()
        );
    }
    let today = now.date_naive();
    if book.day != Some(today) {
        book.day = Some(today);
        book.spent.clear();
    }
    Ok(book)
}

pub fn save(dir: &Path, book: &FleetBook) -> Result<()> {
    let path = path(dir);
    std::fs::create_dir_all(dir)?;
    let bytes = serde_json::to_vec(book)?;
    safe_fs::replace(&path, &bytes, None)
        .map_err(|e| anyhow!("cannot write the fleet ledger `{}`: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_project_sees_what_the_others_spent_and_a_new_day_starts_at_0() {
        let dir = tempfile::tempdir().unwrap();
        let mut book = load(dir.path(), t("2026-06-16T10:00:00Z")).unwrap();
        book.spent.insert(1, 0.3);
        book.spent.insert(2, 0.5);
        book.pending.insert(3, 0.1);
        assert!((book.others(1) - 0.6).abs() < 1e-12);
        save(dir.path(), &book).unwrap();
        let same_day = load(dir.path(), t("2026-06-16T23:00:00Z")).unwrap();
        assert!(
            (same_day.others(3) - 0.8).abs() < 1e-12,
            "pending is never saved"
        );
        let next_day = load(dir.path(), t("2026-06-17T00:00:00Z")).unwrap();
        assert_eq!(next_day.others(3), 0.0);
    }

    #[test]
    fn a_damaged_or_negative_ledger_is_named_not_read_as_zero() {
        let dir = tempfile::tempdir().unwrap();
        let now = t("2026-06-16T10:00:00Z");
        std::fs::write(path(dir.path()), b"{not json").unwrap();
        let e = load(dir.path(), now).unwrap_err().to_string();
        assert!(e.contains("fleet.json") && e.contains("damaged"), "{e}");
        std::fs::write(path(dir.path()), br#"{"spent":{"1":-5}}"#).unwrap();
        let e = load(dir.path(), now).unwrap_err().to_string();
        assert!(e.contains("negative"), "{e}");
    }
}

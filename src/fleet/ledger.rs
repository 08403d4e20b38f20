//! What a fleet's projects share, kept beside their states in
//! `DIR/fleet.json`: each project's spend of the UTC day, so that
//! `--daily-budget` is one budget for the fleet, and the provider's circuit
//! as a project left it open, so that a quota wall seen once holds every
//! other project too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::llm::protocol::{self, Circuit};
use crate::state::safe_fs;
use crate::tick::FleetShare;

/// The most bytes a ledger may hold: a day's spend of many thousand projects.
const MAX_LEDGER_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// The UTC day `spent` counts.
    #[serde(default)]
    pub day: Option<NaiveDate>,
    /// Each project's spend on `day` (USD), by numeric id.
    #[serde(default)]
    pub spent: BTreeMap<u64, f64>,
    /// The provider's circuit as a project last left it open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit: Option<Circuit>,
}

impl Ledger {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("fleet.json")
    }

    /// The ledger under `dir`; a missing one is empty, a damaged one an
    /// error that names it (the fleet would otherwise forget its spend).
    pub fn load(dir: &Path) -> Result<Ledger> {
        let path = Ledger::path(dir);
        let read = safe_fs::read_bounded(&path, MAX_LEDGER_BYTES)
            .map_err(|e| anyhow!("cannot read the fleet ledger `{}`: {e}", path.display()))?;
        let Some(bytes) = read else {
            return Ok(Ledger::default());
        };
        let ledger: Ledger = serde_json::from_slice(&bytes).map_err(|e| {
            anyhow!(
                "the fleet ledger `{}` is damaged ({e}); restore it, or move it away to count today's fleet spend from 0",
                path.display()
            )
        })?;
        if ledger.spent.values().any(|v| !v.is_finite() || *v < 0.0) {
            bail!(
                "the fleet ledger `{}` holds a spend that is negative or not a number; restore it, or move it away",
                path.display()
            );
        }
        Ok(ledger)
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = Ledger::path(dir);
        std::fs::create_dir_all(dir)?;
        let bytes = serde_json::to_vec(self)?;
        safe_fs::replace(&path, &bytes, None)
            .map_err(|e| anyhow!("cannot write the fleet ledger `{}`: {e}", path.display()))
    }

    /// A new UTC day counts from 0.
    pub fn roll(&mut self, now: DateTime<Utc>) {
        let today = now.date_naive();
        if self.day != Some(today) {
            self.day = Some(today);
            self.spent.clear();
        }
    }

    /// What project `id` may know of the fleet before its tick.
    pub fn share(&self, id: u64, now: DateTime<Utc>) -> FleetShare {
        let all: f64 = self.spent.values().sum();
        let own = self.spent.get(&id).copied().unwrap_or(0.0);
        FleetShare {
            others_spent: (all - own).max(0.0),
            held: self.circuit.clone().filter(|c| protocol::is_open(c, now)),
        }
    }

    /// Take in what a project's state says after a tick that woke: its
    /// spend today, and its circuit when open and longer than the fleet's.
    pub fn take_in(&mut self, id: u64, state: &Path, now: DateTime<Utc>) {
        let Ok(Some(state)) = crate::state::store::load(state) else {
            return;
        };
        let mut budget = state.llm.budget.clone();
        crate::gate::budget::roll(&mut budget, now);
        let spent = crate::gate::budget::spent_today(&budget);
        if spent.is_finite() && spent > 0.0 {
            self.spent.insert(id, spent);
        }
        let open = |c: &Circuit| protocol::is_open(c, now);
        if let Some(c) = state.llm.circuit.filter(open)
            && self
                .circuit
                .as_ref()
                .is_none_or(|f| !open(f) || f.until < c.until)
        {
            self.circuit = Some(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_project_sees_what_the_others_spent_today_and_a_new_day_starts_at_0() {
        let mut l = Ledger::default();
        l.roll(t("2026-06-16T10:00:00Z"));
        l.spent.insert(1, 0.3);
        l.spent.insert(2, 0.5);
        assert_eq!(l.share(1, t("2026-06-16T11:00:00Z")).others_spent, 0.5);
        assert_eq!(l.share(3, t("2026-06-16T11:00:00Z")).others_spent, 0.8);
        l.roll(t("2026-06-17T00:00:00Z"));
        assert_eq!(l.share(3, t("2026-06-17T00:01:00Z")).others_spent, 0.0);
    }

    #[test]
    fn a_damaged_or_negative_ledger_is_named_not_read_as_zero() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(Ledger::path(dir.path()), b"{not json").unwrap();
        let e = Ledger::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("fleet.json") && e.contains("damaged"), "{e}");
        std::fs::write(Ledger::path(dir.path()), br#"{"spent":{"1":-5}}"#).unwrap();
        let e = Ledger::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("negative"), "{e}");
    }
}

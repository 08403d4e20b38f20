//! Observation mode's open watches, graded bets and totals, as the state
//! keeps them; `gate::observation` labels, opens and grades them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The four kinds of "did nothing", folded into three labels (a budget deferral
/// is an `Observe` with a short window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Category {
    /// Nothing needed and nothing to learn: a frozen or trusted module.
    NoValue,
    /// Skipped by default, not by judgement: a blind spot, not confidence.
    InsufficientData,
    /// Nothing needed now, but the bet that it stays stable is worth grading.
    Observe,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::NoValue => "NO_VALUE",
            Category::InsufficientData => "INSUFFICIENT_DATA",
            Category::Observe => "OBSERVE",
        }
    }
}

/// A falsifiable bet: "this file stays stable until the checkpoint".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    // A missing field is read as the only bet ever placed.
    #[serde(default = "yes")]
    pub stable: bool,
    #[serde(default)]
    pub risk: String,
    #[serde(default)]
    pub problem_probability: f64,
}

fn yes() -> bool {
    true
}

/// One open bet on one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Watch {
    // Only OBSERVE opens a watch, so that is what a missing label means.
    #[serde(default = "observe_category")]
    pub category: Category,
    #[serde(default)]
    pub prediction: Option<Prediction>,
    pub first_ts: DateTime<Utc>,
    pub last_ts: DateTime<Utc>,
    pub reevaluate_at: DateTime<Utc>,
    #[serde(default)]
    pub rollback_baseline: u32,
    #[serde(default)]
    pub observations: u64,
}

fn observe_category() -> Category {
    Category::Observe
}

/// A graded bet.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Resolution {
    pub path: String,
    pub correct: bool,
    /// "window-elapsed" | "incident-detected".
    pub reason: String,
    pub predicted_stable: bool,
    pub observed_stable: bool,
    pub opened: DateTime<Utc>,
    pub resolved: DateTime<Utc>,
    pub observations: u64,
}

/// Lifetime counters: they outlive the bounded logs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    pub by_category: BTreeMap<String, u64>,
    pub resolved_correct: u64,
    pub resolved_wrong: u64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ObservationLog {
    pub open: BTreeMap<String, Watch>,
    pub resolved: VecDeque<Resolution>,
    pub totals: Totals,
    /// The open watches by age, built at the first eviction of a tick and
    /// never saved: a first run evicts once per file past the limit, and a
    /// pass over every open watch each time was a sixth of its CPU.
    #[serde(skip)]
    pub(crate) age: AgeIndex,
}

/// `(last_ts, path)` of open watches, oldest (then smallest path) first.
/// Entries go stale when a watch is removed or looked at again; they are
/// checked against `open` when they come to the top, so only `observe`,
/// which sets `last_ts`, has to push.
#[derive(Debug, Clone, Default)]
pub(crate) struct AgeIndex(Option<BinaryHeap<Reverse<Aged>>>);

/// When a watch was last looked at, and its path.
type Aged = (DateTime<Utc>, String);

impl PartialEq for AgeIndex {
    // A cache: two logs with the same watches are equal whatever it holds.
    fn eq(&self, _: &AgeIndex) -> bool {
        true
    }
}

impl AgeIndex {
    pub(crate) fn touched(&mut self, at: DateTime<Utc>, path: &str) {
        if let Some(heap) = &mut self.0 {
            heap.push(Reverse((at, path.to_string())));
        }
    }

    /// The oldest open watch other than `keep`, by `last_ts` then path.
    pub(crate) fn oldest(&mut self, open: &BTreeMap<String, Watch>, keep: &str) -> Option<String> {
        let heap = self.0.get_or_insert_with(|| {
            open.iter()
                .map(|(p, w)| Reverse((w.last_ts, p.clone())))
                .collect()
        });
        let mut kept = None;
        let found = loop {
            let Some(Reverse((at, path))) = heap.pop() else {
                break None;
            };
            if open.get(&path).is_none_or(|w| w.last_ts != at) {
                continue;
            }
            if path == keep {
                kept = Some(Reverse((at, path)));
                continue;
            }
            break Some(path);
        };
        heap.extend(kept);
        found
    }
}
